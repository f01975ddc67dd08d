// pages/sandboxes.js — the project's sandboxes, live (GET /v1/watch/sandboxes,
// an event stream of the list whenever it changes), with filters, a create
// form and each row's lifecycle actions.
import { query } from '../api.js';
import { field, section, time } from '../dom.js';
import { actionButtons } from './sandboxactions.js';

const states = ['pending', 'creating', 'running', 'pausing', 'paused', 'resuming', 'suspending', 'suspended', 'waking', 'deleting', 'deleted', 'failed'];

export async function render(main, ctx) {
  const h = ctx.h;
  const stateSel = h('select', { testid: 'filter-state' },
    h('option', { value: '' }, 'all'), states.map((s) => h('option', { value: s }, s)));
  const metaIn = h('input', { type: 'text', testid: 'filter-metadata', placeholder: 'key=value' });
  const filters = h('form', { class: 'inline', onsubmit: (ev) => { ev.preventDefault(); watch(); } },
    field('State', stateSel), field('Metadata', metaIn),
    h('button', { type: 'submit', class: 'secondary' }, 'Apply'));
  stateSel.addEventListener('change', () => watch());

  const tbody = h('tbody');
  const empty = h('tr', { class: 'empty' }, h('td', { colspan: 7 }, 'No sandboxes.'));
  const tableEl = h('table', { testid: 'sandboxes-table', class: 'table' },
    h('thead', null, h('tr', null, ['ID', 'State', 'Template', 'CPUs', 'Memory', 'Created', ''].map((t) => h('th', null, t)))),
    tbody);
  const status = h('span', { class: 'muted' }, 'connecting…');

  main.appendChild(h('h1', null, 'Sandboxes'));
  main.appendChild(section('Filter', filters));
  main.appendChild(section('Sandboxes', tableEl, h('div', { class: 'pager' }, status)));
  main.appendChild(section('Create a sandbox', createForm(ctx)));

  const rows = new Map(); // id → {tr, stateBadge, actions}
  function draw(list) {
    const seen = new Set();
    for (const sb of list.sandboxes || []) {
      seen.add(sb.id);
      let r = rows.get(sb.id);
      if (!r) {
        const stateBadge = h('span', { class: 'badge' });
        const stateCell = h('td', { testid: 'sandbox-state' }, stateBadge);
        const actions = actionButtons(ctx, sb.id);
        const tr = h('tr', { testid: 'sandbox-row', 'data-id': sb.id },
          h('td', { class: 'mono' }, h('a', { testid: 'sandbox-link', href: `#/sandboxes/${encodeURIComponent(sb.id)}` }, sb.id)),
          stateCell,
          h('td', { class: 'mono' }),
          h('td', { class: 'num' }),
          h('td', { class: 'num' }),
          h('td'),
          h('td', { class: 'actions' }, actions.el));
        r = { tr, stateBadge, actions };
        rows.set(sb.id, r);
      }
      r.stateBadge.textContent = sb.state;
      r.stateBadge.className = `badge state-${String(sb.state).replace(/[^a-z0-9_-]/gi, '')}`;
      const cells = r.tr.children;
      cells[2].textContent = shortDigest(sb.template);
      cells[2].title = sb.template || '';
      cells[3].textContent = String(sb.cpus ?? '');
      cells[4].textContent = sb.memory_mib ? `${sb.memory_mib} MiB` : '';
      cells[5].textContent = time(sb.created_at);
      r.actions.update(sb.state);
      tbody.appendChild(r.tr); // in the list's order
    }
    for (const [id, r] of rows) {
      if (!seen.has(id)) { r.tr.remove(); rows.delete(id); }
    }
    if (rows.size === 0) tbody.appendChild(empty); else empty.remove();
    status.textContent = `live · ${rows.size} shown${list.next_cursor ? ' (first page)' : ''} · updated ${new Date().toLocaleTimeString()}`;
  }

  let close = null;
  let retry = null;
  function watch() {
    if (close) close();
    clearTimeout(retry);
    const q = { state: stateSel.value, metadata: metaIn.value.trim(), limit: 200 };
    status.textContent = 'connecting…';
    close = ctx.sse(`/v1/watch/sandboxes${query(q)}`, {
      sandboxes: (data) => {
        try { draw(JSON.parse(data)); } catch (e) { ctx.showError(e); }
      },
      // The server ends the stream every 10 minutes (event reconnect) and
      // the EventSource opens it again by itself. When the server refused
      // the stream (signed out, key revoked, too many live lists open),
      // the EventSource gives up: a plain call finds out why (a 401 goes
      // to sign-in) and the list is watched again a little later.
      error: (ev, es) => {
        if (es.readyState !== EventSource.CLOSED) { status.textContent = 'disconnected; retrying…'; return; }
        status.textContent = 'disconnected; retrying in 10 s…';
        ctx.api.get(`/v1/sandboxes${query({ ...q, limit: 1 })}`).then(
          () => { retry = setTimeout(watch, 10000); },
          (e) => { if (e.status !== 401) { ctx.showError(e); retry = setTimeout(watch, 10000); } });
      },
    });
  }
  watch();
  return () => { clearTimeout(retry); if (close) close(); };
}

function shortDigest(d) {
  const s = String(d || '');
  return s.startsWith('sha256:') ? s.slice(0, 19) : s;
}

// createForm is the create form: template, environment, resources, egress.
function createForm(ctx) {
  const h = ctx.h;
  const template = h('select', { testid: 'create-template' }, h('option', { value: '' }, '(server default)'));
  const env = h('select', { testid: 'create-environment' }, h('option', { value: '' }, '(server default)'));
  const cpus = h('input', { type: 'number', testid: 'create-cpus', min: '1', placeholder: 'default' });
  const memory = h('input', { type: 'number', testid: 'create-memory', min: '1', placeholder: 'default' });
  const egress = h('select', { testid: 'create-egress' },
    h('option', { value: 'default' }, 'default'),
    h('option', { value: 'deny-all' }, 'deny-all'),
    h('option', { value: 'allow-all' }, 'allow-all'));
  const submit = h('button', { type: 'submit', testid: 'create-submit' }, 'Create');
  const done = h('span', { class: 'muted' });

  ctx.api.get('/v1/templates').then((out) => {
    for (const t of out.templates || []) {
      const names = t.names || [];
      if (names.length === 0) template.appendChild(h('option', { value: t.digest }, t.digest.slice(0, 19)));
      for (const n of names) template.appendChild(h('option', { value: n }, n));
    }
  }).catch(() => {});
  ctx.api.get('/v1/environments').then((out) => {
    for (const e of out.environments || []) {
      const label = `${e.name}${e.available === false ? ' (unavailable)' : ''}`;
      env.appendChild(h('option', { value: e.name }, label));
    }
  }).catch(() => {});
  ctx.api.get('/v1/egress-profiles').then((out) => {
    for (const p of out.profiles || []) egress.appendChild(h('option', { value: `profile:${p.name}` }, p.name));
  }).catch(() => {});

  return h('form', {
    class: 'inline',
    onsubmit: async (ev) => {
      ev.preventDefault();
      ctx.showError(null);
      const body = {};
      if (template.value) body.template = template.value;
      if (env.value) body.environment = env.value;
      if (cpus.value) body.cpus = Number(cpus.value);
      if (memory.value) body.memory_mib = Number(memory.value);
      if (egress.value === 'deny-all') body.egress = { default: 'none' };
      else if (egress.value === 'allow-all') body.egress = { default: 'public' };
      else if (egress.value.startsWith('profile:')) body.egress = { profiles: [egress.value.slice(8)] };
      submit.disabled = true;
      try {
        const out = await ctx.api.post('/v1/sandboxes', body);
        done.textContent = `created ${out.sandbox.id}`;
      } catch (e) {
        ctx.showError(e);
      } finally {
        submit.disabled = false;
      }
    },
  }, field('Template', template), field('Environment', env), field('CPUs', cpus), field('Memory (MiB)', memory),
  field('Egress', egress), submit, done);
}
