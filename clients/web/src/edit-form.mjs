// The ✎ Edit form's behaviour: prepare a proof of work in the background while the visitor
// types, submit the proposal with it, and tell the visitor what happened.
//
// The form talks to an `api` object, so the same code serves Conn (whose backend forwards to
// Muster with its own token and the visitor's X-Client-IP) and the development page (which
// calls a local Muster directly, see dev-page.mjs):
//
//   api.challenge()        -> Promise<{challenge, difficulty, expires_at}>
//   api.submit(proposal)   -> Promise<{status, body}>   (proposal: the JSON of POST /v1/edits)
//
// Markup it expects (see index.html): a <form> with data-target="<target id>", a <textarea
// name="body">, the honeypot <input data-honeypot>, a submit button and an element with
// data-status (aria-live) for messages.
import { solveInWorker } from './solver.mjs';

/** The contract's limit on the whole request body of POST /v1/edits. */
export const REQUEST_LIMIT_BYTES = 4096;

/** A challenge this close to its expiry is replaced before it is used. */
const EXPIRY_MARGIN_MS = 15_000;

/**
 * A challenge fetched and solved in the background; `take()` resolves to the solved
 * `{challenge, nonce, difficulty, ms}` (fetching a fresh one if the current one is stale).
 */
export class PreparedWork {
  constructor(api, { now = () => Date.now(), solver = solveInWorker } = {}) {
    this.api = api;
    this.now = now;
    this.solver = solver;
    this.pending = null;
    this.controller = null;
  }

  /** Starts fetching and solving a challenge unless one is already on its way. */
  prepare() {
    if (!this.pending) {
      this.controller = new AbortController();
      const { signal } = this.controller;
      const pending = (async () => {
        const c = await this.api.challenge();
        const solved = await this.solver(c.challenge, c.difficulty, { signal });
        return {
          challenge: c.challenge,
          difficulty: c.difficulty,
          expiresAt: Date.parse(c.expires_at),
          nonce: solved.nonce,
          ms: solved.ms,
        };
      })();
      this.pending = pending;
      // A failed preparation is retried by the next take().
      pending.catch(() => {
        if (this.pending === pending) {
          this.pending = null;
        }
      });
    }
    return this.pending;
  }

  /** The solved work, used once: the next call prepares a new challenge. */
  async take() {
    let work = await this.prepare();
    this.pending = null;
    if (!(work.expiresAt - this.now() > EXPIRY_MARGIN_MS)) {
      work = await this.prepare();
      this.pending = null;
    }
    return work;
  }

  /** Stops any search in progress. */
  cancel() {
    this.controller?.abort(new Error('cancelled'));
    this.pending = null;
  }
}

/** The visitor-facing message for a refused submission. */
export function refusalMessage(status, body) {
  const code = body?.error?.code;
  switch (code) {
    case 'E_RATE_LIMITED':
      return 'You have sent many proposals today. Please try again tomorrow.';
    case 'E_TARGET':
      return 'This page does not take edit proposals.';
    case 'E_TOO_LARGE':
      return 'Your proposal is too long. Please shorten it.';
    case 'E_POW':
      return 'The anti-spam check did not go through. Please send it again.';
    default:
      if (status === 400 && body?.error?.message?.includes('empty')) {
        return 'Your proposal is empty once formatting is removed.';
      }
      return `Your proposal could not be sent (${code ?? `HTTP ${status}`}). Please try again later.`;
  }
}

/**
 * Wires `form` to `api`. `solveOn` says when the first challenge is fetched and solved:
 * 'load' (now; the default) or 'focus' (when the visitor first enters the text box, so that
 * pages viewed without editing cost nothing). Returns `{work}` (the PreparedWork, for tests and
 * for pages that want to cancel it).
 */
export function mountEditForm(form, api, { solveOn = 'load' } = {}) {
  const body = form.elements.namedItem('body');
  const honeypot = form.querySelector('[data-honeypot]');
  const button = form.querySelector('button[type="submit"]');
  const status = form.querySelector('[data-status]');
  const work = new PreparedWork(api);

  const say = (text, state) => {
    status.textContent = text;
    status.dataset.state = state;
  };

  // Solve ahead, so that the work is usually done by the time the visitor presses Send.
  const warmUp = () => {
    work.prepare().catch(() => {});
  };
  if (solveOn === 'focus') {
    body.addEventListener('focus', warmUp, { once: true });
  } else {
    warmUp();
  }

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    if (form.dataset.busy === 'true') {
      return;
    }
    const text = body.value;
    if (text.trim() === '') {
      say('Please write your proposal first.', 'error');
      body.focus();
      return;
    }
    form.dataset.busy = 'true';
    button.disabled = true;
    delete form.dataset.editId;
    say('Sending… (a short anti-spam check runs in your browser first)', 'busy');
    try {
      let result;
      for (let attempt = 0; attempt < 2; attempt += 1) {
        const pow = await work.take();
        const proposal = {
          target: form.dataset.target,
          body: text,
          website: honeypot.value,
          pow: { challenge: pow.challenge, nonce: pow.nonce },
        };
        const size = new TextEncoder().encode(JSON.stringify(proposal)).length;
        if (size > REQUEST_LIMIT_BYTES) {
          result = { status: 413, body: { error: { code: 'E_TOO_LARGE' } } };
          break;
        }
        result = await api.submit(proposal);
        // A challenge can be refused after a long pause (expired) or a double send
        // (already used): one fresh try.
        if (!(result.status === 400 && result.body?.error?.code === 'E_POW')) {
          break;
        }
      }
      if (result.status === 202) {
        form.dataset.editId = result.body.edit_id;
        say('Thank you! Your proposal was received and awaits review by the page’s owner.', 'sent');
        body.value = '';
      } else {
        say(refusalMessage(result.status, result.body), 'error');
      }
    } catch (error) {
      say(`Your proposal could not be sent: ${error.message}`, 'error');
    } finally {
      form.dataset.busy = 'false';
      button.disabled = false;
      warmUp();
    }
  });
  return { work };
}
