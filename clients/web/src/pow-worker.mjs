// Module worker: solves one proof-of-work challenge off the main thread.
//
// In:  {challenge, difficulty}
// Out: {type: 'progress', tries}                          now and then
//      {type: 'solved', nonce, tries, ms}                 once, then the worker idles
//      {type: 'error', message}                           on a bad request or a failure
// The page stops a search by terminating the worker (solver.mjs does).
import { solve } from './pow.mjs';

self.onmessage = async (event) => {
  const { challenge, difficulty } = event.data ?? {};
  const started = performance.now();
  try {
    const found = await solve(challenge, difficulty, {
      onProgress: (tries) => self.postMessage({ type: 'progress', tries }),
    });
    if (found === null) {
      self.postMessage({ type: 'error', message: 'no nonce found' });
      return;
    }
    const ms = performance.now() - started;
    self.postMessage({ type: 'solved', nonce: found.nonce, tries: found.tries, ms });
  } catch (error) {
    self.postMessage({ type: 'error', message: String(error?.message ?? error) });
  }
};
