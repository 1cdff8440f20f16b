// The solver against known answers of the Rust verifier (test/vectors.json), no server and no
// browser: `npm test` in clients/web.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { createBLAKE3 } from '../node_modules/hash-wasm/dist/index.esm.js';
import { MAX_NONCE_DIGITS, leadingZeroBits, solve, workDigest, workHasher } from '../src/pow.mjs';

const vectors = JSON.parse(readFileSync(new URL('./vectors.json', import.meta.url), 'utf8'));

const hex = (bytes) => Buffer.from(bytes).toString('hex');
const unhex = (text) => new Uint8Array(Buffer.from(text, 'hex'));

test('the vectors cover every kind of known answer', () => {
  assert.ok(vectors.challenges.length >= 5);
  assert.ok(vectors.solutions.length >= 8);
  assert.ok(vectors.digests.length >= 20);
});

test('work digests equal the Rust work_digest, byte for byte', async () => {
  for (const v of vectors.digests) {
    const digest = await workDigest(v.challenge, v.nonce);
    assert.equal(hex(digest), v.digest_hex, `${v.challenge} ‖ ${v.nonce}`);
    assert.equal(leadingZeroBits(digest), v.leading_zero_bits, `${v.challenge} ‖ ${v.nonce}`);
  }
});

test('the solver finds the same first nonce as the Rust solver', async () => {
  for (const v of vectors.solutions) {
    const found = await solve(v.challenge, v.difficulty);
    assert.equal(found.nonce, v.nonce, `${v.challenge} at difficulty ${v.difficulty}`);
    assert.equal(found.tries, Number(v.nonce) + 1);
    const digest = await workDigest(v.challenge, found.nonce);
    assert.equal(hex(digest), v.digest_hex);
    assert.equal(leadingZeroBits(digest), v.leading_zero_bits);
    assert.ok(v.leading_zero_bits >= v.difficulty);
  }
});

test('every nonce below the first solution falls short, as the Rust solver saw', async () => {
  const v = vectors.solutions.find((s) => s.difficulty === 12 && s.challenge.startsWith('v1.'));
  const hasher = await workHasher(v.challenge);
  for (let n = 0; n < Number(v.nonce); n += 1) {
    assert.ok(leadingZeroBits(hasher.digestOf(n)) < 12, `nonce ${n}`);
  }
});

test('tokens have the documented layout and keyed-BLAKE3 MAC', async () => {
  // v1.<issued_at i64 BE ‖ difficulty u8 ‖ seed, hex>.<keyed BLAKE3 of the length-prefixed fields>
  const key = unhex(vectors.key_hex);
  for (const c of vectors.challenges) {
    const issued = new Uint8Array(8);
    new DataView(issued.buffer).setBigInt64(0, BigInt(c.issued_at));
    const seed = unhex(c.seed_hex);
    const payload = new Uint8Array([...issued, c.difficulty, ...seed]);
    const fields = [new TextEncoder().encode('muster-pow-v1'), [1], issued, [c.difficulty], seed];
    const encoding = [];
    for (const f of fields) {
      encoding.push(0, 0, 0, f.length, ...f);
    }
    assert.equal(encoding.length, 59);
    const mac = await createBLAKE3(256, key);
    mac.init();
    mac.update(new Uint8Array(encoding));
    assert.equal(c.token, `v1.${hex(payload)}.${mac.digest('hex')}`);
    assert.equal(c.token.length, 118);
  }
});

test('leading zero bits of crafted digests', () => {
  const digest = new Uint8Array(32).fill(0xff);
  digest[0] = 0x00;
  digest[1] = 0x0f;
  assert.equal(leadingZeroBits(digest), 12);
  digest[0] = 0x80;
  assert.equal(leadingZeroBits(digest), 0);
  digest[0] = 0x01;
  assert.equal(leadingZeroBits(digest), 7);
  assert.equal(leadingZeroBits(new Uint8Array(32)), 256);
  const last = new Uint8Array(32);
  last[31] = 1;
  assert.equal(leadingZeroBits(last), 255);
});

test('leading zero bits agree with a bit-by-bit count', () => {
  const reference = (d) => {
    let count = 0;
    for (let i = 0; i < 256 && (d[i >> 3] & (0x80 >> (i & 7))) === 0; i += 1) {
      count += 1;
    }
    return count;
  };
  let seed = 12345;
  const random = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed >> 16;
  };
  for (let round = 0; round < 2000; round += 1) {
    const d = new Uint8Array(32).map(() => random() & 0xff);
    d.fill(0, 0, round % 33);
    assert.equal(leadingZeroBits(d), reference(d));
  }
});

test('nonces are checked like the verifier checks them', async () => {
  const hasher = await workHasher('anything');
  assert.equal(MAX_NONCE_DIGITS, 20);
  assert.equal(hasher.digest('0'.repeat(20)).length, 32);
  for (const bad of ['', '1'.repeat(21), '12a', '-1', ' 1', '١']) {
    assert.throws(() => hasher.digest(bad), RangeError, JSON.stringify(bad));
  }
});

test('solve honours start, step and maxTries, and refuses bad arguments', async () => {
  assert.deepEqual(await solve('anything', 0), { nonce: '0', tries: 1 });
  assert.equal(await solve('anything', 255, { maxTries: 1000 }), null);
  const v = vectors.solutions.find((s) => s.difficulty === 12 && s.challenge.startsWith('v1.'));
  const n = Number(v.nonce);
  // Two workers splitting the search: the one whose lane holds the nonce finds it.
  const lane = await solve(v.challenge, 12, { start: n % 2, step: 2 });
  assert.ok(Number(lane.nonce) <= n);
  await assert.rejects(solve('x', 256), RangeError);
  await assert.rejects(solve('x', 1.5), RangeError);
  await assert.rejects(solve('x', 8, { step: 0 }), RangeError);
  await assert.rejects(solve('', 8), TypeError);
});

test('progress is reported while searching', async () => {
  const seen = [];
  await solve('x', 255, { maxTries: 1000, progressEvery: 250, onProgress: (t) => seen.push(t) });
  assert.deepEqual(seen, [250, 500, 750, 1000]);
});
