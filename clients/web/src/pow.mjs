// The edit intake's proof of work, client side: the exact counterpart of
// crates/muster-antispam/src/pow.rs (`work_digest`, `leading_zero_bits`, `solve`).
//
// The work digest is BLAKE3(UTF-8 bytes of the challenge ‖ UTF-8 bytes of the nonce); the nonce
// is a decimal number of 1 to 20 digits; the digest must have at least `difficulty` leading zero
// bits, counted from the most significant bit of its first byte. The solver tries 0, 1, 2, … in
// decimal without leading zeros, like the Rust reference solver, so both find the same nonce.
//
// BLAKE3 is hash-wasm's (WebAssembly, inlined in one self-contained ES module file). The import
// is a relative path so that this file runs unchanged in Node and, without a bundler, in a
// browser module worker served next to node_modules (module workers have no import maps). With
// a bundler, import from 'hash-wasm' instead.
import { createBLAKE3 } from '../node_modules/hash-wasm/dist/index.esm.js';

/** Most digits a nonce may have (the verifier refuses more). */
export const MAX_NONCE_DIGITS = 20;

/** Largest nonce the solver tries: every integer up to it is exact in a double. */
export const MAX_NONCE = Number.MAX_SAFE_INTEGER;

/** Leading zero bits of `digest` (a Uint8Array), from the most significant bit of byte 0. */
export function leadingZeroBits(digest) {
  let bits = 0;
  for (const byte of digest) {
    if (byte !== 0) {
      return bits + Math.clz32(byte) - 24;
    }
    bits += 8;
  }
  return bits;
}

function checkDifficulty(difficulty) {
  if (!Number.isInteger(difficulty) || difficulty < 0 || difficulty > 255) {
    throw new RangeError(`difficulty must be an integer from 0 to 255, got ${difficulty}`);
  }
}

function checkNonce(nonce) {
  if (typeof nonce !== 'string' || !/^[0-9]{1,20}$/.test(nonce)) {
    throw new RangeError('a nonce is 1 to 20 decimal digits');
  }
}

/**
 * A hasher bound to one challenge: `digest(nonce)` returns BLAKE3(challenge ‖ nonce) as a
 * 32-byte Uint8Array. The returned array is fresh on every call.
 */
export async function workHasher(challenge) {
  if (typeof challenge !== 'string' || challenge.length === 0) {
    throw new TypeError('the challenge must be a non-empty string');
  }
  const blake3 = await createBLAKE3(256);
  const prefix = new TextEncoder().encode(challenge);
  const buf = new Uint8Array(prefix.length + MAX_NONCE_DIGITS);
  buf.set(prefix);
  const base = prefix.length;
  // Writes the decimal digits of n (a safe integer ≥ 0) after the challenge; returns the end.
  const putDecimal = (n) => {
    const digits = String(n);
    for (let i = 0; i < digits.length; i += 1) {
      buf[base + i] = digits.charCodeAt(i);
    }
    return base + digits.length;
  };
  const hashTo = (end) => {
    blake3.init();
    blake3.update(buf.subarray(0, end));
    return blake3.digest('binary');
  };
  return {
    /** BLAKE3(challenge ‖ nonce) for a nonce string of 1 to 20 digits. */
    digest(nonce) {
      checkNonce(nonce);
      for (let i = 0; i < nonce.length; i += 1) {
        buf[base + i] = nonce.charCodeAt(i);
      }
      return hashTo(base + nonce.length);
    },
    /** BLAKE3(challenge ‖ decimal(n)) for a safe integer n ≥ 0. */
    digestOf(n) {
      return hashTo(putDecimal(n));
    },
  };
}

/** BLAKE3(challenge ‖ nonce), 32 bytes. */
export async function workDigest(challenge, nonce) {
  return (await workHasher(challenge)).digest(nonce);
}

/**
 * Finds the first nonce from `start` (counting by `step`) whose work digest has at least
 * `difficulty` leading zero bits.
 *
 * Options: `start` (default 0) and `step` (default 1) let several workers share the search;
 * `maxTries` (default: until MAX_NONCE) bounds it; `onProgress(tries)` is called every
 * `progressEvery` tries (default 65536).
 *
 * Resolves to `{nonce, tries}` (nonce a decimal string), or `null` when `maxTries` ran out.
 */
export async function solve(challenge, difficulty, options = {}) {
  checkDifficulty(difficulty);
  const { start = 0, step = 1, maxTries = Infinity, onProgress, progressEvery = 65536 } = options;
  if (!Number.isSafeInteger(start) || start < 0 || !Number.isSafeInteger(step) || step < 1) {
    throw new RangeError('start must be a safe integer ≥ 0 and step a safe integer ≥ 1');
  }
  const hasher = await workHasher(challenge);
  let tries = 0;
  for (let n = start; n <= MAX_NONCE && tries < maxTries; n += step) {
    tries += 1;
    if (leadingZeroBits(hasher.digestOf(n)) >= difficulty) {
      return { nonce: String(n), tries };
    }
    if (onProgress && tries % progressEvery === 0) {
      onProgress(tries);
    }
  }
  return null;
}
