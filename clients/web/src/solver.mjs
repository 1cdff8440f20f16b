// Main-thread side of the solver: runs pow-worker.mjs in a module Web Worker so that the page
// stays responsive while it searches.
//
//   import { solveInWorker } from './solver.mjs';
//   const { nonce, tries, ms } = await solveInWorker(challenge, difficulty, { signal });
//
// Aborting `signal` terminates the worker and rejects with the signal's reason.

const WORKER_URL = new URL('./pow-worker.mjs', import.meta.url);

export function solveInWorker(challenge, difficulty, { signal, onProgress } = {}) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const worker = new Worker(WORKER_URL, { type: 'module', name: 'muster-pow' });
    const finish = () => {
      worker.terminate();
      signal?.removeEventListener('abort', onAbort);
    };
    const onAbort = () => {
      finish();
      reject(signal.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    worker.onmessage = (event) => {
      const msg = event.data;
      if (msg.type === 'progress') {
        onProgress?.(msg.tries);
      } else if (msg.type === 'solved') {
        finish();
        resolve({ nonce: msg.nonce, tries: msg.tries, ms: msg.ms });
      } else {
        finish();
        reject(new Error(`proof of work failed: ${msg.message}`));
      }
    };
    worker.onerror = (event) => {
      finish();
      reject(new Error(`proof-of-work worker failed: ${event.message || 'could not load'}`));
    };
    worker.postMessage({ challenge, difficulty });
  });
}
