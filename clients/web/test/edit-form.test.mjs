// The form's logic that needs no browser: challenge reuse and expiry, retries, messages.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { PreparedWork, refusalMessage } from '../src/edit-form.mjs';
import { solve } from '../src/pow.mjs';

/** An api handing out numbered challenges that expire `ttl` ms after `clock.t`. */
function fakeApi(clock, { ttl = 300_000, failFirst = false } = {}) {
  let issued = 0;
  return {
    issued: () => issued,
    async challenge() {
      issued += 1;
      if (failFirst && issued === 1) {
        throw new Error('network down');
      }
      return {
        challenge: `challenge-${issued}`,
        difficulty: 4,
        expires_at: new Date(clock.t + ttl).toISOString(),
      };
    },
  };
}

// The worker's contract, run in-process.
const inProcess = async (challenge, difficulty) => {
  const found = await solve(challenge, difficulty);
  return { nonce: found.nonce, tries: found.tries, ms: 0 };
};

test('a prepared challenge is used once, then a new one is prepared', async () => {
  const clock = { t: Date.parse('2026-05-01T12:00:00Z') };
  const api = fakeApi(clock);
  const work = new PreparedWork(api, { now: () => clock.t, solver: inProcess });
  work.prepare();
  work.prepare();
  const first = await work.take();
  assert.equal(first.challenge, 'challenge-1');
  assert.equal(first.nonce, (await solve('challenge-1', 4)).nonce);
  const second = await work.take();
  assert.equal(second.challenge, 'challenge-2');
  assert.equal(api.issued(), 2);
});

test('a challenge about to expire is replaced before use', async () => {
  const clock = { t: Date.parse('2026-05-01T12:00:00Z') };
  const api = fakeApi(clock, { ttl: 300_000 });
  const work = new PreparedWork(api, { now: () => clock.t, solver: inProcess });
  await work.prepare();
  clock.t += 290_000; // 10 s left: under the 15 s margin
  const used = await work.take();
  assert.equal(used.challenge, 'challenge-2');
});

test('a failed preparation is retried by the next take', async () => {
  const clock = { t: Date.parse('2026-05-01T12:00:00Z') };
  const api = fakeApi(clock, { failFirst: true });
  const work = new PreparedWork(api, { now: () => clock.t, solver: inProcess });
  await assert.rejects(work.prepare(), /network down/);
  await new Promise((r) => setTimeout(r, 0));
  const used = await work.take();
  assert.equal(used.challenge, 'challenge-2');
});

test('every refusal becomes a sentence for the visitor', () => {
  const err = (code, message = '') => ({ error: { code, message } });
  assert.match(refusalMessage(429, err('E_RATE_LIMITED')), /tomorrow/);
  assert.match(refusalMessage(422, err('E_TARGET')), /does not take/);
  assert.match(refusalMessage(413, err('E_TOO_LARGE')), /too long/);
  assert.match(refusalMessage(400, err('E_POW')), /anti-spam/);
  assert.match(
    refusalMessage(400, err('E_BAD_REQUEST', 'the body is empty once markup is removed')),
    /empty/,
  );
  assert.match(refusalMessage(503, err('E_UNAVAILABLE')), /E_UNAVAILABLE/);
  assert.match(refusalMessage(502, null), /HTTP 502/);
});
