// pages/environments.js — the execution environments (GET /v1/environments).
import { badge, section, table, time } from '../dom.js';

export async function render(main, ctx) {
  const h = ctx.h;
  const out = await ctx.api.get('/v1/environments');
  main.appendChild(h('h1', null, 'Environments'));
  main.appendChild(section('Execution environments', table('environments-table',
    ['Name', 'Isolation', 'Status', 'Default', 'Snapshot', 'OOM scope', 'Host / guest', 'Ref', 'Checked'],
    out.environments || [],
    (e) => h('tr', { testid: 'environment-row', 'data-id': e.name },
      h('td', null, h('strong', null, e.name)),
      h('td', null, e.isolation),
      h('td', null,
        badge(!e.enabled ? 'disabled' : e.available ? 'available' : 'unavailable', 'environment-status'),
        e.reason ? h('div', { class: 'muted' }, e.reason) : null),
      h('td', null, e.default ? 'yes' : ''),
      h('td', null, [e.snapshot, e.snapshot_format].filter(Boolean).join(' · ')),
      h('td', null, e.oom_scope || ''),
      h('td', null, `${e.host || ''} / ${e.guest || ''}`),
      h('td', { class: 'mono', title: e.ref }, String(e.ref || '').slice(0, 23)),
      h('td', null, time(e.checked_at))),
    'No environments.')));
}
