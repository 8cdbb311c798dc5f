// The Worker's entry module: the Rust Worker that worker-build generates (build/index.js), and,
// only when DEMO=true, the built-in demo backend under /demo/ (worker/demo.mjs). Everything else,
// and /demo/ itself without DEMO, goes to the Rust Worker unchanged.
//
// worker-build 0.8 exports its fetch handler as a class extending WorkerEntrypoint (wrapped in a
// Proxy that re-creates the instance after a wasm trap): subclassing it keeps that behaviour,
// and the Durable Object classes are re-exported so their bindings still find them.
import RustWorker, { TaskRunner, TokenBroker } from '../build/index.js';
import { demo } from './demo.mjs';

export { TaskRunner, TokenBroker };

export default class Flowgate extends RustWorker {
  fetch(request) {
    return (this.env.DEMO === 'true' && demo(request)) || super.fetch(request);
  }
}
