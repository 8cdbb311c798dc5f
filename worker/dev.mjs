// The entry module for local development (`make dev` runs `wrangler dev worker/dev.mjs`): the
// Worker of worker/entry.mjs with, only when DEMO=true, the built-in demo backend under /demo/
// (worker/demo.mjs) in front of it. Everything else, and /demo/ itself without DEMO, goes to the
// Worker unchanged. `wrangler deploy` uses worker/entry.mjs, so the demo is never deployed.
import worker, { CallBridge, ClientSession, LegacySession, TaskRunner, TokenBroker } from './entry.mjs';
import { demo } from './demo.mjs';

export { CallBridge, ClientSession, LegacySession, TaskRunner, TokenBroker };

export default {
  fetch(request, env, ctx) {
    if (env.DEMO === 'true') {
      const answer = demo(request);
      if (answer) return answer;
    }
    return worker.fetch(request, env, ctx);
  },
};
