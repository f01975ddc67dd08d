// pages/pools.js — warm pools (admin): GET /v1/pools with fill (ready of
// target), hits and misses, refreshed every few seconds; PUT /v1/pools
// creates a pool or sets its size; DELETE /v1/pools/{id} removes one.
import { badge, field, section, table, time } from '../dom.js';
import { adminOnly, busy, intOrZero } from './admin.js';

const refreshEvery = 5000;

export async function render(main, ctx) {
  if (adminOnly(main, ctx, 'Pools')) return undefined;
  const h = ctx.h;
  const [pools, envs] = await Promise.all([
    ctx.api.get('/v1/pools'),
    ctx.api.get('/v1/environments').catch(() => ({ environments: [] })),
  ]);

  const tpl = h('input', { type: 'text', testid: 'pool-template', placeholder: 'name:tag or sha256:…', required: true });
  const env = h('select', { testid: 'pool-environment' },
    h('option', { value: '' }, '(default)'),
    (envs.environments || []).map((e) => h('option', { value: e.name }, e.name)));
  const cpus = h('input', { type: 'number', min: 0, testid: 'pool-cpus', placeholder: 'default' });
  const mem = h('input', { type: 'number', min: 0, testid: 'pool-memory', placeholder: 'default' });
  const size = h('input', { type: 'number', min: 0, testid: 'pool-size', value: '1', required: true });
  const submit = h('button', { type: 'submit', testid: 'pool-submit' }, 'Create / set size');
  const form = h('form', { class: 'inline', onsubmit: save },
    field('Template', tpl), field('Environment', env), field('CPUs', cpus),
    field('Memory (MiB)', mem), field('Ready per node', size), submit);

  const box = h('div');
  main.appendChild(h('h1', null, 'Pools'));
  main.appendChild(section('Warm pools', box));
  main.appendChild(section('Create a pool or set its size', form,
    h('p', { class: 'muted' }, 'A pool is keyed by template, environment, CPUs and memory; the same key again sets its size (0 drains it).')));
  draw(pools.pools || []);

  function draw(list) {
    box.replaceChildren(table('pools-table',
      ['Pool', 'Template', 'Environment', 'CPUs', 'Memory', 'Fill (ready / target)', 'Starting', 'Hits', 'Misses', 'Last used', ''],
      list,
      (p) => h('tr', { testid: 'pool-row', 'data-id': p.id },
        h('td', { class: 'mono' }, p.id, p.drained ? h('div', null, badge('drained')) : null),
        h('td', null, p.template),
        h('td', null, p.environment),
        h('td', { class: 'num' }, String(p.cpus)),
        h('td', { class: 'num' }, `${p.memory_mib} MiB`),
        h('td', { testid: 'pool-fill' },
          h('progress', { max: Math.max(p.size, 1), value: String(Math.min(p.ready, Math.max(p.size, 1))) }),
          ` ${p.ready} / ${p.size}`,
          p.draining ? h('div', { class: 'muted' }, `${p.draining} draining`) : null),
        h('td', { class: 'num' }, String(p.starting)),
        h('td', { class: 'num', testid: 'pool-hits' }, String(p.hits)),
        h('td', { class: 'num', testid: 'pool-misses' }, String(p.misses)),
        h('td', null, time(p.last_used_at)),
        h('td', { class: 'actions' },
          h('button', { type: 'button', class: 'secondary small', testid: 'pool-edit', onclick: () => edit(p) }, 'Edit'),
          h('button', { type: 'button', class: 'danger small', testid: 'pool-delete', onclick: (ev) => remove(p, ev.currentTarget) }, 'Delete'))),
      'No pools.'));
  }

  function edit(p) {
    tpl.value = p.template;
    env.value = p.environment;
    cpus.value = String(p.cpus);
    mem.value = String(p.memory_mib);
    size.value = String(p.size);
    size.focus();
  }

  async function refresh() {
    try {
      draw((await ctx.api.get('/v1/pools')).pools || []);
    } catch (e) {
      ctx.showError(e);
    }
  }

  async function save(ev) {
    ev.preventDefault();
    await busy(ctx, submit, async () => {
      const body = {
        template: tpl.value.trim(),
        size: intOrZero(size, 'Size'),
        environment: env.value || undefined,
        cpus: intOrZero(cpus, 'CPUs') || undefined,
        memory_mib: intOrZero(mem, 'Memory') || undefined,
      };
      await ctx.api.put('/v1/pools', body);
      await refresh();
    });
  }

  async function remove(p, button) {
    if (!window.confirm(`Delete pool ${p.id} (${p.template})? Its unclaimed sandboxes are deleted.`)) return;
    await busy(ctx, button, async () => {
      await ctx.api.del(`/v1/pools/${encodeURIComponent(p.id)}`);
      await refresh();
    });
  }

  const timer = setInterval(refresh, refreshEvery);
  return () => clearInterval(timer);
}
