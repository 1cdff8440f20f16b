// The solver against the real server and the Rust code, in Node (no browser). Needs a running
// Muster: `cargo xtask browser-test` runs this file before the browser tests.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { leadingZeroBits, solve, workHasher } from '../src/pow.mjs';
import { challenge, pending, rustSolve, settings, submit } from './support.mjs';

const vectors = JSON.parse(readFileSync(new URL('./vectors.json', import.meta.url), 'utf8'));

test('a challenge from the server, solved here, is accepted and held for review', async () => {
  const c = await challenge();
  assert.equal(c.challenge.length, 118);
  assert.ok(Number.isInteger(c.difficulty) && c.difficulty > 0, JSON.stringify(c));
  const found = await solve(c.challenge, c.difficulty);
  const r = await submit(
    {
      target: settings().target,
      body: 'Solved in Node: <em>plain</em> text',
      website: '',
      pow: { challenge: c.challenge, nonce: found.nonce },
    },
    '198.51.100.10',
  );
  assert.equal(r.status, 202, JSON.stringify(r.body));
  assert.equal(r.body.state, 'pending_approval');
  const stored = (await pending()).find((e) => e.edit_id === r.body.edit_id);
  assert.equal(stored?.body, 'Solved in Node: plain text');
});

test('the server counts the same leading zero bits as the solver', async () => {
  // A nonce with too little work is refused with the count the Rust verifier found; the
  // challenge is not spent by a refusal, so one challenge serves every count.
  const c = await challenge();
  const hasher = await workHasher(c.challenge);
  const wanted = new Set([0, 1, 2, 3, 5, 8, 11].filter((k) => k < c.difficulty));
  for (let n = 0; wanted.size > 0 && n < 50_000_000; n += 1) {
    const zeros = leadingZeroBits(hasher.digestOf(n));
    if (!wanted.delete(zeros)) {
      continue;
    }
    const r = await submit(
      {
        target: settings().target,
        body: 'x',
        website: '',
        pow: { challenge: c.challenge, nonce: String(n) },
      },
      '198.51.100.11',
    );
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.error.code, 'E_POW');
    assert.equal(
      r.body.error.message,
      `insufficient proof of work: ${zeros} leading zero bits, ${c.difficulty} required`,
    );
  }
  assert.equal(wanted.size, 0, `counts not met: ${[...wanted]}`);
});

test('the Rust solver (muster solve) re-derives every known answer of vectors.json', () => {
  for (const v of vectors.solutions) {
    assert.equal(rustSolve(v.challenge, v.difficulty), v.nonce, v.challenge);
  }
});

test('the Rust and JavaScript solvers find the same nonce for fresh and unusual challenges', async () => {
  const inputs = [];
  for (let i = 0; i < 8; i += 1) {
    inputs.push((await challenge()).challenge);
  }
  inputs.push('é', 'ünïcödé ✎ 編集', '\u{1F600}', 'a'.repeat(300), 'v1.0.0');
  for (const text of inputs) {
    for (const difficulty of [6, 11]) {
      const js = await solve(text, difficulty);
      assert.equal(js.nonce, rustSolve(text, difficulty), `${text} at ${difficulty}`);
    }
  }
});
