// The Worker's entry module (wrangler.toml's `main`): the Rust Worker that worker-build generates
// (build/index.js). The built-in demo backend is not in it: `make dev` runs worker/dev.mjs,
// which puts the demo in front of this module, so a deployed bundle carries none of it.
//
// worker-build 0.8 exports its fetch handler as a WorkerEntrypoint class wrapped in a Proxy: for
// every request the runtime builds an instance, a Proxy around it and another around its `fetch`,
// only to notice a wasm trap and re-create the module on the next request. That costs about a
// tenth of a small request's CPU, so requests call the class's own `fetch` directly, and the
// recovery stays: a Rust panic is a wasm trap (scripts/build-wasm.sh builds with
// -Cpanic=immediate-abort; a prebuilt-std build's panic hook first sets `criticalError` in
// `globalThis.__worker_init_state` itself), a trap seen here or by the glue's error listener
// marks the module, and a request that finds it marked goes through the Proxy once, which
// re-creates the module. The Durable Object
// classes are re-exported as they are, so their bindings still find them.
import RustWorker, { CallBridge, ClientSession, LegacySession, TaskRunner, TokenBroker } from '../build/index.js';

export { CallBridge, ClientSession, LegacySession, TaskRunner, TokenBroker };

const rustFetch = RustWorker.prototype.fetch;
const initState = globalThis.__worker_init_state;

function markTrap(error) {
  if (error instanceof WebAssembly.RuntimeError && initState) initState.criticalError = true;
  throw error;
}

export default {
  fetch(request, env, ctx) {
    if (!initState || initState.criticalError) return new RustWorker(ctx, env).fetch(request);
    try {
      // A Response when the answer was ready at once (src/runtime/workers.rs), else a promise.
      const answer = rustFetch.call({ env, ctx }, request);
      return answer instanceof Response ? answer : answer.catch(markTrap);
    } catch (error) {
      return markTrap(error);
    }
  },
};
