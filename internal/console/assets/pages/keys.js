// pages/keys.js — API keys (admin): GET /v1/admin/keys?project_id=, create
// (POST /v1/admin/keys; the secret is shown once, here, and never again)
// and revoke (DELETE /v1/admin/keys/{id}).
import { query } from '../api.js';
import { badge, field, section, table, time } from '../dom.js';
import { adminOnly, busy } from './admin.js';

export async function render(main, ctx) {
  if (adminOnly(main, ctx, 'API keys')) return;
  const h = ctx.h;
  const projects = (await ctx.api.get('/v1/admin/projects')).projects || [];
  const projectOptions = () => projects.map((p) => h('option', { value: p.id }, `${p.name} (${p.id})`));

  const shown = h('select', { testid: 'keys-project', onchange: () => refresh().catch((e) => ctx.showError(e)) }, projectOptions());
  shown.value = ctx.session.project;
  const box = h('div');
  const secret = h('div', { testid: 'key-created' });

  const proj = h('select', { testid: 'key-project' }, projectOptions());
  proj.value = ctx.session.project;
  const role = h('select', { testid: 'key-role' }, h('option', { value: 'member' }, 'member'), h('option', { value: 'admin' }, 'admin'));
  const name = h('input', { type: 'text', testid: 'key-name', placeholder: 'optional' });
  const format = h('select', { testid: 'key-format' },
    h('option', { value: 'airlock' }, 'airlock (alk_…)'), h('option', { value: 'e2b' }, 'e2b (e2b_…)'));
  const create = h('button', { type: 'submit', testid: 'key-submit' }, 'Create key');
  const form = h('form', { class: 'inline', onsubmit: onCreate },
    field('Project', proj), field('Role', role), field('Name', name), field('Format', format), create);

  main.appendChild(h('h1', null, 'API keys'));
  main.appendChild(section('Keys', h('div', { class: 'toolbar' }, field('Project', shown)), box));
  main.appendChild(section('Create a key', form, secret));
  await refresh();

  async function refresh() {
    const out = await ctx.api.get(`/v1/admin/keys${query({ project_id: shown.value || ctx.session.project })}`);
    box.replaceChildren(table('keys-table', ['Key', 'Name', 'Role', 'Created', 'Status', ''], out.keys || [],
      (k) => h('tr', { testid: 'key-row', 'data-id': k.id },
        h('td', { class: 'mono' }, k.id, k.id === ctx.session.key_id ? h('span', { class: 'muted' }, ' (this session)') : null),
        h('td', null, k.name || ''),
        h('td', null, k.role),
        h('td', null, time(k.created_at)),
        h('td', null, k.revoked_at ? [badge('revoked'), ' ', time(k.revoked_at)] : badge('active')),
        h('td', { class: 'actions' }, k.revoked_at ? null
          : h('button', { type: 'button', class: 'danger small', testid: 'key-revoke', onclick: (ev) => revoke(k, ev.currentTarget) }, 'Revoke'))),
      'No keys.'));
  }

  async function onCreate(ev) {
    ev.preventDefault();
    await busy(ctx, create, async () => {
      const k = await ctx.api.post('/v1/admin/keys', {
        project_id: proj.value, role: role.value, name: name.value.trim() || undefined, format: format.value,
      });
      name.value = '';
      secret.replaceChildren(
        h('p', null, `Key ${k.id} (${k.role} of ${k.project_id}) created. Copy its secret now: it is not shown again.`),
        h('code', { class: 'secret', testid: 'key-secret' }, k.token),
        h('div', { class: 'actions' }, h('button', { type: 'button', class: 'secondary small', onclick: () => secret.replaceChildren() }, 'Done')));
      shown.value = k.project_id;
      await refresh();
    });
  }

  async function revoke(k, button) {
    const self = k.id === ctx.session.key_id ? ' This is the key of this session: you will be signed out.' : '';
    if (!window.confirm(`Revoke key ${k.id}${k.name ? ` (${k.name})` : ''}? It stops working at once.${self}`)) return;
    await busy(ctx, button, async () => {
      await ctx.api.del(`/v1/admin/keys/${encodeURIComponent(k.id)}`);
      await refresh();
    });
  }
}
