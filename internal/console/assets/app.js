// app.js — the console's shell: the session, the hash router and the ctx
// every page module receives (see docs/console.md for the page contract).
import { client, request } from './api.js';
import { clear, h } from './dom.js';

// Routes: a hash path pattern → the page module under pages/. The first
// match wins; captures become params.
const routes = [
  { pattern: /^\/signin$/, page: 'signin', keys: [], public: true },
  { pattern: /^\/sandboxes$/, page: 'sandboxes', keys: [], nav: 'sandboxes' },
  { pattern: /^\/sandboxes\/([^/]+)$/, page: 'sandbox', keys: ['id'], nav: 'sandboxes' },
  { pattern: /^\/templates$/, page: 'templates', keys: [], nav: 'templates' },
  { pattern: /^\/builds\/([^/]+)$/, page: 'build', keys: ['id'], nav: 'templates' },
  { pattern: /^\/environments$/, page: 'environments', keys: [], nav: 'environments' },
  { pattern: /^\/pools$/, page: 'pools', keys: [], nav: 'pools' },
  { pattern: /^\/operations$/, page: 'operations', keys: [], nav: 'operations' },
  { pattern: /^\/projects$/, page: 'projects', keys: [], nav: 'projects' },
  { pattern: /^\/keys$/, page: 'keys', keys: [], nav: 'keys' },
];
const defaultRoute = '#/sandboxes';
const signinRoute = '#/signin';

const els = {
  header: document.getElementById('header'),
  main: document.getElementById('main'),
  error: document.getElementById('error'),
  whoami: document.getElementById('whoami'),
  signout: document.getElementById('signout'),
  nav: document.getElementById('nav'),
};

// state is the shell's one piece of mutable state: the session and the
// page on screen (its cleanup and the streams it opened).
const state = {
  session: null, // {key_id, project, role}
  csrf: '',
  renderSeq: 0,
  page: null, // {seq, cleanup, closers:Set}
};

function showError(e) {
  clear(els.error);
  if (!e) return;
  if (typeof e === 'string') {
    els.error.textContent = e;
    return;
  }
  if (e.status === 401) return; // the router is on its way to sign-in
  const msg = e.message || String(e);
  els.error.textContent = e.code && !msg.startsWith(e.code) ? `${e.code}: ${msg}` : msg;
}

function unauthorized() {
  setSession(null);
  if (location.hash !== signinRoute) location.hash = signinRoute;
}

const api = client(() => state.csrf, unauthorized);

function setSession(s) {
  state.session = s ? { key_id: s.key_id, project: s.project, role: s.role } : null;
  state.csrf = s ? s.csrf || '' : '';
  const admin = !!s && s.role === 'admin';
  els.header.hidden = !s;
  els.whoami.textContent = s ? `${s.project} · ${s.role}` : '';
  for (const a of els.nav.querySelectorAll('[data-admin]')) a.hidden = !admin;
}

// sse opens an EventSource on a same-origin API path; handlers maps event
// names to functions of the event's data string ("error" gets the Event
// when the connection fails). It returns close(); the stream is also
// closed when the page that opened it goes away.
function sseFor(closers) {
  return (path, handlers) => {
    const es = new EventSource(path, { withCredentials: true });
    for (const [name, fn] of Object.entries(handlers || {})) {
      if (name === 'error') es.addEventListener('error', (ev) => fn(ev, es));
      else es.addEventListener(name, (ev) => fn(ev.data, ev));
    }
    let closed = false;
    const close = () => {
      if (closed) return;
      closed = true;
      es.close();
      closers.delete(close);
    };
    closers.add(close);
    return close;
  };
}

function leavePage() {
  const p = state.page;
  state.page = null;
  if (!p) return;
  if (typeof p.cleanup === 'function') {
    try { p.cleanup(); } catch (e) { console.error('page cleanup', e); }
  }
  for (const c of [...p.closers]) c();
}

function match(hash) {
  const path = hash.replace(/^#/, '') || '/';
  for (const r of routes) {
    const m = r.pattern.exec(path);
    if (m) {
      const params = {};
      r.keys.forEach((k, i) => { params[k] = decodeURIComponent(m[i + 1]); });
      return { route: r, params };
    }
  }
  return null;
}

function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

async function route() {
  const seq = ++state.renderSeq;
  leavePage();
  showError(null);
  const m = match(location.hash);
  if (!m) {
    location.replace(state.session ? defaultRoute : signinRoute);
    return;
  }
  if (!m.route.public && !state.session) {
    location.replace(signinRoute);
    return;
  }
  for (const a of els.nav.querySelectorAll('a[data-route]')) {
    a.classList.toggle('active', a.getAttribute('data-route') === m.route.nav);
  }
  const closers = new Set();
  const page = { seq, cleanup: null, closers };
  state.page = page;
  const ctx = {
    api,
    sse: sseFor(closers),
    session: state.session,
    isAdmin: !!state.session && state.session.role === 'admin',
    csrf: state.csrf,
    h,
    showError,
    navigate,
    signedIn: (s) => { setSession(s); navigate(defaultRoute); },
  };
  clear(els.main);
  const main = h('div', { class: `page page-${m.route.page}` });
  els.main.appendChild(main);
  try {
    const mod = await import(`./pages/${m.route.page}.js`);
    if (seq !== state.renderSeq) return;
    const cleanup = await mod.render(main, ctx, m.params);
    if (seq !== state.renderSeq) {
      // The user navigated on while this page was loading.
      if (typeof cleanup === 'function') cleanup();
      for (const c of [...closers]) c();
      return;
    }
    page.cleanup = cleanup;
  } catch (e) {
    if (seq === state.renderSeq) showError(e);
    else console.error(e);
  }
}

async function signout() {
  try {
    await request('DELETE', '/ui/session', { csrf: state.csrf });
  } catch (e) {
    if (e.status !== 401) {
      showError(e);
      return;
    }
  }
  setSession(null);
  navigate(signinRoute);
}

async function start() {
  els.signout.addEventListener('click', signout);
  window.addEventListener('hashchange', route);
  try {
    setSession(await request('GET', '/ui/session'));
  } catch (e) {
    setSession(null);
    if (e.status !== 401) showError(e);
  }
  route(); // an empty or unknown hash is replaced, which routes again

}

start();
