// pages/projects.js — projects (admin): GET/POST /v1/admin/projects and each
// project's quota (GET/PUT /v1/admin/projects/{id}/quota; an empty limit is
// unlimited).
import { field, section, table, time } from '../dom.js';
import { adminOnly, busy } from './admin.js';

const limits = [
  ['sandboxes', 'Sandboxes'],
  ['cpus', 'CPUs'],
  ['memory_mib', 'Memory (MiB)'],
  ['disk_mib', 'Disk (MiB)'],
];

export async function render(main, ctx) {
  if (adminOnly(main, ctx, 'Projects')) return;
  const h = ctx.h;
  const box = h('div');
  const quotaBox = h('div', { testid: 'quota' });
  const name = h('input', { type: 'text', testid: 'project-name', required: true, placeholder: 'name' });
  const create = h('button', { type: 'submit', testid: 'project-submit' }, 'Create project');
  const form = h('form', { class: 'inline', onsubmit: onCreate }, field('Name', name), create);

  main.appendChild(h('h1', null, 'Projects'));
  main.appendChild(section('Projects', box));
  main.appendChild(section('Create a project', form));
  main.appendChild(quotaBox);
  await refresh();

  async function refresh() {
    const out = await ctx.api.get('/v1/admin/projects');
    box.replaceChildren(table('projects-table', ['Project', 'Name', 'Created', ''], out.projects || [],
      (p) => h('tr', { testid: 'project-row', 'data-id': p.id },
        h('td', { class: 'mono' }, p.id),
        h('td', null, p.name),
        h('td', null, time(p.created_at)),
        h('td', { class: 'actions' },
          h('button', { type: 'button', class: 'secondary small', testid: 'project-quota', onclick: () => showQuota(p) }, 'Quota'))),
      'No projects.'));
  }

  async function onCreate(ev) {
    ev.preventDefault();
    await busy(ctx, create, async () => {
      const p = await ctx.api.post('/v1/admin/projects', { name: name.value.trim() });
      name.value = '';
      await refresh();
      await showQuota(p);
    });
  }

  async function showQuota(p) {
    await busy(ctx, null, async () => {
      const q = await ctx.api.get(`/v1/admin/projects/${encodeURIComponent(p.id)}/quota`);
      drawQuota(p, q);
    });
  }

  function drawQuota(p, q) {
    const inputs = {};
    const rows = limits.map(([k, label]) => {
      const v = q.limits ? q.limits[k] : null;
      inputs[k] = h('input', { type: 'number', min: 0, testid: `quota-${k}`, placeholder: 'unlimited', value: v === null || v === undefined ? '' : String(v) });
      return h('tr', null,
        h('td', null, label),
        h('td', { class: 'num' }, String(q.usage ? q.usage[k] : '')),
        h('td', null, inputs[k]));
    });
    const save = h('button', { type: 'submit', testid: 'quota-submit' }, 'Save quota');
    const form = h('form', {
      onsubmit: async (ev) => {
        ev.preventDefault();
        await busy(ctx, save, async () => {
          const body = {};
          for (const [k, label] of limits) {
            const s = inputs[k].value.trim();
            if (s === '') { body[k] = null; continue; }
            const n = Number(s);
            if (!Number.isInteger(n) || n < 0) throw new Error(`${label} must be a whole number or empty (unlimited)`);
            body[k] = n;
          }
          drawQuota(p, await ctx.api.put(`/v1/admin/projects/${encodeURIComponent(p.id)}/quota`, body));
        });
      },
    },
    h('table', { class: 'table', testid: 'quota-table' },
      h('thead', null, h('tr', null, h('th', null, 'Resource'), h('th', { class: 'num' }, 'In use'), h('th', null, 'Limit (empty: unlimited)'))),
      h('tbody', null, rows)),
    h('div', { class: 'actions' }, save));
    quotaBox.replaceChildren(section(`Quota of ${p.name} (${p.id})`, form));
  }
}
