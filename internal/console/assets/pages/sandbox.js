// pages/sandbox.js — one sandbox: its live state and actions, and tabs for
// a terminal, its processes, files, egress and operations.
import { section } from '../dom.js';
import { actionButtons } from './sandboxactions.js';
import { mountTerminal } from './terminal.js';
import { mountFiles } from './files.js';
import { mountEgress, mountOperations, mountProcesses } from './sandboxtabs.js';

const statePoll = 1500; // ms between reads of the sandbox's state

const tabs = [
  { name: 'terminal', label: 'Terminal', mount: mountTerminal },
  { name: 'processes', label: 'Processes', mount: mountProcesses },
  { name: 'files', label: 'Files', mount: mountFiles },
  { name: 'egress', label: 'Egress', mount: mountEgress },
  { name: 'operations', label: 'Operations', mount: mountOperations },
];

export async function render(main, ctx, params) {
  const h = ctx.h;
  const id = params.id;
  const stateEl = h('span', { testid: 'sandbox-state', class: 'badge' }, '…');
  const actions = actionButtons(ctx, id, () => refresh());
  const details = h('dl', { class: 'kv' });
  main.appendChild(h('h1', null, 'Sandbox ', h('span', { class: 'mono', testid: 'sandbox-id' }, id), ' ', stateEl));
  main.appendChild(h('div', { class: 'toolbar' }, actions.el));
  main.appendChild(section('Details', details));

  const tabBar = h('div', { class: 'tabs', role: 'tablist' });
  const panel = h('div', { class: 'section tabpanel' });
  main.appendChild(tabBar);
  main.appendChild(panel);

  let closed = false;
  let sandbox = null;
  let timer = null;
  async function refresh() {
    try {
      const sb = await ctx.api.get(`/v1/sandboxes/${encodeURIComponent(id)}`);
      if (closed) return;
      sandbox = sb;
      stateEl.textContent = sb.state;
      stateEl.className = `badge state-${String(sb.state).replace(/[^a-z0-9_-]/gi, '')}`;
      actions.update(sb.state);
      drawDetails(sb);
    } catch (e) {
      if (closed) return;
      if (e.status === 404) {
        stateEl.textContent = 'deleted';
        actions.update('deleted');
      } else {
        ctx.showError(e);
      }
    }
  }
  function drawDetails(sb) {
    while (details.firstChild) details.removeChild(details.firstChild);
    const kv = [
      ['Template', sb.template], ['CPUs', sb.cpus], ['Memory', sb.memory_mib ? `${sb.memory_mib} MiB` : ''],
      ['Disk', sb.disk_mib ? `${sb.disk_mib} MiB` : ''], ['Environment', sb.environment], ['Node', sb.node_id],
      ['Source', sb.source], ['Reason', sb.state_reason], ['Created', sb.created_at], ['Updated', sb.updated_at],
      ['Metadata', Object.entries(sb.metadata || {}).map(([k, v]) => `${k}=${v}`).join(', ')],
    ];
    for (const [k, v] of kv) {
      if (v === undefined || v === null || v === '') continue;
      details.appendChild(h('dt', null, k));
      details.appendChild(h('dd', { class: 'mono' }, String(v)));
    }
  }
  await refresh();
  timer = setInterval(refresh, statePoll);

  // Tabs: one mounted at a time; its cleanup runs when another is chosen
  // or the page is left (the terminal's hangs its shell up).
  let tabCleanup = null;
  const buttons = new Map();
  let showSeq = 0;
  async function show(name) {
    const seq = ++showSeq;
    if (tabCleanup) { try { tabCleanup(); } catch (e) { console.error(e); } tabCleanup = null; }
    for (const [n, b] of buttons) {
      b.setAttribute('aria-selected', String(n === name));
      b.classList.toggle('active', n === name);
    }
    while (panel.firstChild) panel.removeChild(panel.firstChild);
    const tab = tabs.find((t) => t.name === name);
    try {
      const c = await tab.mount(panel, ctx, id, () => sandbox);
      if (closed || seq !== showSeq) { if (typeof c === 'function') c(); return; } // left, or another tab chosen
      tabCleanup = typeof c === 'function' ? c : null;
    } catch (e) {
      ctx.showError(e);
    }
  }
  for (const t of tabs) {
    const b = h('button', { type: 'button', role: 'tab', testid: `tab-${t.name}`, onclick: () => show(t.name) }, t.label);
    buttons.set(t.name, b);
    tabBar.appendChild(b);
  }
  // Not the terminal: opening it starts a shell under the user's key, which
  // must take a click, never just a link to this page.
  show('processes');

  return () => {
    closed = true;
    clearInterval(timer);
    if (tabCleanup) tabCleanup();
  };
}
