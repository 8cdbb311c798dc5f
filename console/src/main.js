// The Flowgate web console: sign-in, then one page per hash route (#/apps, #/servers, ...).
// The token lives in sessionStorage (this tab only) and travels only in the Authorization header.
import { api, session } from './api.js';
import { ageAnnouncement, field, form, h, input } from './ui.js';
import { appsPage } from './pages/apps.js';
import { serversPage } from './pages/servers.js';
import { tasksPage } from './pages/tasks.js';
import { usagePage } from './pages/usage.js';
import { auditPage } from './pages/audit.js';
import { tokensPage } from './pages/tokens.js';
import { playgroundPage } from './pages/playground.js';
import { callLogPage } from './pages/calllog.js';

const PAGES = {
  apps: ['Apps', appsPage],
  servers: ['Servers', serversPage],
  tasks: ['Tasks', tasksPage],
  usage: ['Usage', usagePage],
  audit: ['Audit log', auditPage],
  tokens: ['Console tokens', tokensPage],
  playground: ['Tool playground', playgroundPage],
  calls: ['Call log', callLogPage],
};

const main = document.getElementById('main');
const nav = document.getElementById('nav');

function signIn() {
  nav.hidden = true;
  const token = input({ type: 'password', name: 'token', autocomplete: 'current-password', required: true });
  main.replaceChildren(
    h('section', { class: 'card narrow' },
      h('h1', {}, 'Sign in'),
      h('p', {}, 'Use ADMIN_TOKEN or a console token (fgc_…). It is kept for this tab only.'),
      form(async () => {
        const t = token.value.trim();
        // Any read proves the token; a refusal (401, 429, 503) is the token field's error.
        try {
          await api('/apps', { token: t });
        } catch (e) {
          e.errors = [{ field: 'token', message: e.message }];
          throw e;
        }
        session.set(t);
        // The page asked for (a bookmark, a reload), else the apps.
        if (location.hash) render();
        else location.hash = '#/apps';
      },
      field('Console token', token, { name: 'token' }),
      h('button', { type: 'submit', class: 'primary' }, 'Sign in'))));
  token.focus();
}

/** `#/servers/abc?x=1` → ['servers', ['abc'], URLSearchParams]. */
function parseHash() {
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?');
  const [page, ...rest] = path.split('/').filter(Boolean);
  return [page || 'apps', rest.map(decodeURIComponent), new URLSearchParams(query ?? '')];
}

/** Behind Cloudflare Access the API already knows who this is: no token to ask for. Asked
 * once per page load (Access does not come and go within a tab). */
let accessAsked = false;
async function signInByAccess() {
  accessAsked = true;
  try {
    const index = await api('/', { token: null });
    if (!index.caller?.actor?.startsWith('access:')) return false;
    session.setAccess(index.caller.actor);
    return true;
  } catch {
    return false;
  }
}

let rendering = 0;
async function render() {
  if (!session.signedIn) {
    if (accessAsked) return signIn();
    const ticket = ++rendering;
    const signedIn = await signInByAccess();
    // Another render began meanwhile (a link followed): it decides what shows.
    if (ticket !== rendering) return;
    if (!signedIn) return signIn();
  }
  document.getElementById('sign-out').textContent = session.access ? `Sign out (${session.access.slice(7)})` : 'Sign out';
  nav.hidden = false;
  const [page, args, query] = parseHash();
  const [title, show] = PAGES[page] ?? PAGES.apps;
  for (const a of nav.querySelectorAll('a')) {
    if (a.getAttribute('href') === `#/${page}`) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = `${title} · Flowgate console`;
  const ticket = ++rendering;
  const section = h('section', { class: 'page', 'aria-busy': 'true' }, h('h1', {}, title));
  main.replaceChildren(section);
  try {
    await show(section, { args, query, refresh: render });
  } catch (err) {
    if (err.status === 401) {
      session.clear();
      return signIn();
    }
    section.append(h('div', { class: 'form-error', role: 'alert' }, err.message));
  } finally {
    if (ticket === rendering) section.removeAttribute('aria-busy');
  }
}

document.getElementById('sign-out').addEventListener('click', () => {
  const access = session.access;
  session.clear();
  // Access's own sign-out ends its session; otherwise the next page would be signed in again.
  if (access) return location.assign('/cdn-cgi/access/logout');
  document.getElementById('status').textContent = '';
  if (location.hash) location.hash = ''; // the hashchange shows the sign-in
  else signIn();
});
window.addEventListener('hashchange', () => {
  ageAnnouncement();
  render();
  main.focus();
});
render();
