// pages/templates.js — templates (GET /v1/templates) and builds (GET
// /v1/builds, paged, each linking to its live log at #/builds/<id>).
import { query } from '../api.js';
import { badge, bytes, section, table, time } from '../dom.js';

export async function render(main, ctx) {
  const h = ctx.h;
  const [tpls, builds] = await Promise.all([
    ctx.api.get('/v1/templates'),
    ctx.api.get('/v1/builds'),
  ]);

  main.appendChild(h('h1', null, 'Templates'));
  main.appendChild(section('Templates', table('templates-table',
    ['Names', 'Digest', 'Size', 'In use', 'Created'],
    tpls.templates || [],
    (t) => h('tr', { testid: 'template-row', 'data-id': t.digest },
      h('td', null, (t.names || []).length ? (t.names || []).join(', ') : h('span', { class: 'muted' }, '(untagged)')),
      h('td', { class: 'mono', title: t.digest }, shortDigest(t.digest)),
      h('td', { class: 'num' }, bytes(t.size_bytes)),
      h('td', { class: 'num' }, t.in_use === undefined || t.in_use === null ? '' : String(t.in_use)),
      h('td', null, time(t.created_at))),
    'No templates.')));

  const buildsBox = h('div');
  const more = h('button', { type: 'button', class: 'secondary small', testid: 'builds-more', onclick: loadMore }, 'More');
  const rows = [...(builds.builds || [])];
  let cursor = builds.next_cursor || '';
  main.appendChild(section('Builds', buildsBox, h('div', { class: 'pager' }, more)));
  draw();

  function draw() {
    buildsBox.replaceChildren(table('builds-table',
      ['Build', 'Kind', 'Name', 'Source', 'State', 'Steps', 'Created', 'Finished'],
      rows,
      (b) => h('tr', { testid: 'build-row', 'data-id': b.id },
        h('td', { class: 'mono' }, h('a', { href: `#/builds/${encodeURIComponent(b.id)}`, testid: 'build-link' }, b.id)),
        h('td', null, b.kind),
        h('td', null, b.name || ''),
        h('td', null, b.source || ''),
        h('td', null, badge(b.state, 'build-state'), b.error ? h('div', { class: 'muted' }, b.error.message) : null),
        h('td', { class: 'num' }, steps(b)),
        h('td', null, time(b.created_at)),
        h('td', null, time(b.finished_at))),
      'No builds.'));
    more.hidden = !cursor;
  }

  async function loadMore() {
    more.disabled = true;
    try {
      const next = await ctx.api.get(`/v1/builds${query({ cursor })}`);
      rows.push(...(next.builds || []));
      cursor = next.next_cursor || '';
      draw();
    } catch (e) {
      ctx.showError(e);
    } finally {
      more.disabled = false;
    }
  }
}

export function shortDigest(d) {
  const s = String(d || '');
  return s.startsWith('sha256:') ? s.slice(0, 19) : s;
}

export function steps(b) {
  if (!b.steps_total) return '';
  const cached = b.steps_cached ? ` (${b.steps_cached} cached)` : '';
  return `${b.steps_done || 0}/${b.steps_total}${cached}`;
}
