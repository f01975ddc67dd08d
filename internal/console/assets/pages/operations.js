// pages/operations.js — lifecycle operations (GET /v1/operations): the
// caller's project (an admin may name another), filtered by sandbox, state
// and kind, newest first, a page at a time (limit, cursor).
import { query } from '../api.js';
import { badge, field, section, table, time } from '../dom.js';

const pageSize = 50;
const states = ['pending', 'running', 'succeeded', 'failed'];
const kinds = ['create', 'delete', 'pause', 'resume', 'suspend', 'wake'];

export async function render(main, ctx) {
  const h = ctx.h;
  const select = (testid, values) => h('select', { testid },
    h('option', { value: '' }, 'all'), values.map((v) => h('option', { value: v }, v)));
  const sandbox = h('input', { type: 'text', testid: 'operations-sandbox', placeholder: 'sbx_…' });
  const state = select('operations-state', states);
  const kind = select('operations-kind', kinds);
  const project = ctx.isAdmin ? h('input', { type: 'text', testid: 'operations-project', placeholder: ctx.session.project }) : null;
  const apply = h('button', { type: 'submit', testid: 'operations-apply' }, 'Apply');
  const form = h('form', { class: 'inline', onsubmit: (ev) => { ev.preventDefault(); first(); } },
    field('Sandbox', sandbox), field('State', state), field('Kind', kind),
    project ? field('Project', project) : null, apply);
  const box = h('div');
  const firstBtn = h('button', { type: 'button', class: 'secondary small', testid: 'operations-first', onclick: () => first() }, 'First page');
  const nextBtn = h('button', { type: 'button', class: 'secondary small', testid: 'operations-next', onclick: () => next() }, 'Next page');
  const pageInfo = h('span', { class: 'muted' });

  main.appendChild(h('h1', null, 'Operations'));
  main.appendChild(section('Filter', form));
  main.appendChild(section('Operations', box, h('div', { class: 'pager' }, firstBtn, nextBtn, pageInfo)));

  let cursor = '';
  let pageNo = 1;
  let filters = {};

  async function load(c) {
    const out = await ctx.api.get(`/v1/operations${query({ ...filters, limit: pageSize, cursor: c })}`);
    draw(out.operations || []);
    cursor = out.next_cursor || '';
    nextBtn.hidden = !cursor;
    firstBtn.hidden = pageNo === 1;
    pageInfo.textContent = `page ${pageNo}`;
  }

  async function first() {
    filters = {
      sandbox: sandbox.value.trim(),
      state: state.value,
      kind: kind.value,
      project: project ? project.value.trim() : '',
    };
    pageNo = 1;
    ctx.showError(null);
    try { await load(''); } catch (e) { ctx.showError(e); }
  }

  async function next() {
    pageNo++;
    try { await load(cursor); } catch (e) { pageNo--; ctx.showError(e); }
  }

  function draw(ops) {
    box.replaceChildren(operationsTable(h, ops));
  }

  await load('');
}

// operationsTable is the operations-table the sandbox page's tab can share.
export function operationsTable(h, ops) {
  return table('operations-table',
    ['Operation', 'Kind', 'State', 'Sandbox', 'Attempts', 'Source', 'Error', 'Created', 'Finished'],
    ops,
    (o) => h('tr', { testid: 'operation-row', 'data-id': o.id },
      h('td', { class: 'mono' }, o.id),
      h('td', null, o.kind),
      h('td', null, badge(o.state, 'operation-state')),
      h('td', { class: 'mono' }, h('a', { href: `#/sandboxes/${encodeURIComponent(o.sandbox_id)}` }, o.sandbox_id)),
      h('td', { class: 'num' }, String(o.attempts)),
      h('td', null, o.source || ''),
      h('td', null, o.error ? `${o.error.code}: ${o.error.message}` : ''),
      h('td', null, time(o.created_at)),
      h('td', null, time(o.finished_at))),
    'No operations.');
}
