// pages/sandboxactions.js — a sandbox's lifecycle buttons (pause, resume,
// suspend, wake, delete), enabled by its state; shared by the list and the
// sandbox page.

const actions = [
  { name: 'pause', label: 'Pause', when: ['running'] },
  { name: 'resume', label: 'Resume', when: ['paused'] },
  { name: 'suspend', label: 'Suspend', when: ['running', 'paused'] },
  { name: 'wake', label: 'Wake', when: ['suspended'] },
  { name: 'delete', label: 'Delete', when: null },
];

// actionButtons returns {el, update(state)}; onDone runs after a request
// was accepted (e.g. to refresh a view that does not stream).
export function actionButtons(ctx, id, onDone) {
  const h = ctx.h;
  const path = `/v1/sandboxes/${encodeURIComponent(id)}`;
  const buttons = actions.map((a) => {
    const b = h('button', {
      type: 'button',
      class: a.name === 'delete' ? 'danger small' : 'secondary small',
      testid: `action-${a.name}`,
      onclick: async () => {
        if (a.name === 'delete' && !window.confirm(`Delete sandbox ${id}? Its processes and files are lost.`)) return;
        ctx.showError(null);
        b.disabled = true;
        try {
          if (a.name === 'delete') await ctx.api.del(path);
          else await ctx.api.post(`${path}/${a.name}`);
          if (onDone) onDone(a.name);
        } catch (e) {
          ctx.showError(e);
        } finally {
          b.disabled = false;
          update(current);
        }
      },
    }, a.label);
    return { a, b };
  });
  let current = '';
  function update(state) {
    current = state;
    for (const { a, b } of buttons) {
      b.disabled = state === 'deleted' || state === 'deleting' || (a.when !== null && !a.when.includes(state));
    }
  }
  return { el: h('span', { class: 'actions' }, buttons.map((x) => x.b)), update };
}
