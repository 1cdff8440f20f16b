// Shared helpers of the tests that need a running Muster (server.test.mjs, browser.test.mjs).
// `cargo xtask browser-test` starts PostgreSQL and Muster and sets the variables below; without
// them these tests fail (they never skip).
import { spawnSync } from 'node:child_process';

/** A required environment variable. */
export function env(name) {
  const value = process.env[name];
  if (!value) {
    throw new Error(
      `${name} is not set: these tests need a running Muster; run them with \`cargo xtask browser-test\``,
    );
  }
  return value;
}

export const settings = () => ({
  url: env('MUSTER_URL'),
  conn: env('MUSTER_CONN_TOKEN'),
  operator: env('MUSTER_OPERATOR_TOKEN'),
  target: env('MUSTER_TARGET'),
  bin: env('MUSTER_BIN'),
});

/** One JSON call: resolves to {status, body, headers}. */
export async function call(method, path, token, { body, headers = {} } = {}) {
  const { url } = settings();
  const res = await fetch(`${url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed, headers: res.headers };
}

export async function challenge() {
  const r = await call('POST', '/v1/edits/challenge', settings().conn, { body: {} });
  if (r.status !== 200) {
    throw new Error(`POST /v1/edits/challenge: ${r.status} ${JSON.stringify(r.body)}`);
  }
  return r.body;
}

export function submit(proposal, clientIp) {
  return call('POST', '/v1/edits', settings().conn, {
    body: proposal,
    headers: { 'x-client-ip': clientIp },
  });
}

/** Every pending proposal (the operator's view). */
export async function pending() {
  const r = await call('GET', '/v1/edits?state=pending_approval&limit=500', settings().operator);
  if (r.status !== 200) {
    throw new Error(`GET /v1/edits: ${r.status} ${JSON.stringify(r.body)}`);
  }
  return r.body.edits;
}

/** The value of one sample of /metrics, 0 when absent. */
export async function metric(name, labels) {
  const { url } = settings();
  const text = await (await fetch(`${url}/metrics`)).text();
  const wanted = `${name}{${labels}}`;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${wanted} `)) {
      return Number(line.slice(wanted.length + 1));
    }
  }
  return 0;
}

/** `muster solve CHALLENGE --difficulty D`: the Rust reference solver's nonce. */
export function rustSolve(challengeText, difficulty) {
  const out = spawnSync(settings().bin, ['solve', challengeText, '--difficulty', String(difficulty)], {
    encoding: 'utf8',
  });
  if (out.status !== 0) {
    throw new Error(`muster solve failed (${out.status}): ${out.stderr}`);
  }
  return out.stdout.trim();
}

/**
 * The live feed (`GET /v1/events`, operator) read in the background: `events` collects
 * `{event, data}` frames; `waitFor(pred, ms)` resolves to the first matching frame.
 */
export async function watchFeed() {
  const { url, operator } = settings();
  const controller = new AbortController();
  const res = await fetch(`${url}/v1/events`, {
    headers: { authorization: `Bearer ${operator}`, accept: 'text/event-stream' },
    signal: controller.signal,
  });
  if (res.status !== 200) {
    throw new Error(`GET /v1/events: ${res.status}`);
  }
  const events = [];
  const waiters = new Set();
  const publish = (frame) => {
    events.push(frame);
    for (const w of waiters) {
      if (w.pred(frame)) {
        waiters.delete(w);
        w.resolve(frame);
      }
    }
  };
  (async () => {
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const chunk of res.body) {
        buffer += decoder.decode(chunk, { stream: true });
        let end;
        while ((end = buffer.indexOf('\n\n')) !== -1) {
          const raw = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const frame = {};
          for (const line of raw.split('\n')) {
            const colon = line.indexOf(':');
            if (colon > 0) {
              frame[line.slice(0, colon)] = line.slice(colon + 1).trimStart();
            }
          }
          if (frame.event) {
            publish({ event: frame.event, data: frame.data ? JSON.parse(frame.data) : null });
          }
        }
      }
    } catch {
      // Aborted by close().
    }
  })();
  return {
    events,
    waitFor(pred, ms) {
      const seen = events.find(pred);
      if (seen) {
        return Promise.resolve(seen);
      }
      return new Promise((resolve, reject) => {
        const waiter = { pred, resolve };
        waiters.add(waiter);
        setTimeout(() => {
          if (waiters.delete(waiter)) {
            reject(new Error(`no matching feed event within ${ms} ms`));
          }
        }, ms);
      });
    },
    close() {
      controller.abort();
    },
  };
}

/** Median and nearest-rank 90th percentile of numbers. */
export function summary(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const n = sorted.length;
  const median = n % 2 ? sorted[(n - 1) / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  const p90 = sorted[Math.ceil(0.9 * n) - 1];
  return { n, median, p90, min: sorted[0], max: sorted[n - 1] };
}
