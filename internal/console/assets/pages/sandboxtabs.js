// pages/sandboxtabs.js — the processes, egress and operations tabs of the
// sandbox page.
import { query } from '../api.js';
import { badge, section, table, time } from '../dom.js';
import { attach } from './attach.js';

const processPoll = 3000; // ms between reads of the process list
const maxOutput = 256 * 1024; // characters of output kept on screen
const maxDecisions = 500; // decision rows kept on screen

// mountProcesses: GET …/processes as a table; choosing a row attaches
// read-only to its output (an attachment with only "read", over the
// WebSocket) and shows it in process-output.
export async function mountProcesses(panel, ctx, id) {
  const h = ctx.h;
  const path = `/v1/sandboxes/${encodeURIComponent(id)}/processes`;
  const box = h('div');
  const title = h('span', { class: 'muted' }, 'Choose a process to follow its output.');
  const output = h('pre', { class: 'log', testid: 'process-output' });
  panel.appendChild(box);
  panel.appendChild(section('Output', title, output));

  let selected = '';
  let conn = null;
  let closed = false;
  const dec = new TextDecoder();

  function status(p) {
    if (p.running) return 'running';
    if (p.signal) return `killed (${p.signal})`;
    return `exited ${p.exit_code ?? ''}`;
  }
  function draw(list) {
    const procs = list.processes || [];
    const el = table('processes-table', ['ID', 'PID', 'Command', 'Status', 'Started'], procs, (p) =>
      h('tr', { testid: 'process-row', 'data-id': p.id, class: p.id === selected ? 'selected clickable' : 'clickable', onclick: () => follow(p) },
        h('td', { class: 'mono' }, p.id),
        h('td', { class: 'num' }, String(p.pid ?? '')),
        h('td', { class: 'mono' }, (p.args || []).join(' ')),
        h('td', null, badge(p.running ? 'running' : 'stopped'), ' ', status(p), p.pty ? ' · pty' : ''),
        h('td', null, time(p.started_at))), 'No processes.');
    while (box.firstChild) box.removeChild(box.firstChild);
    box.appendChild(el);
  }
  async function load() {
    try {
      const list = await ctx.api.get(path);
      if (!closed) draw(list);
    } catch (e) {
      if (!closed) ctx.showError(e);
    }
  }
  async function follow(p) {
    if (conn) { conn.close(); conn = null; }
    selected = p.id;
    output.textContent = '';
    title.textContent = `${p.id}: ${(p.args || []).join(' ')}`;
    try {
      const session = await ctx.api.post(`${path}/${encodeURIComponent(p.id)}/attachments`, { actions: ['read'] });
      if (closed || selected !== p.id) return;
      conn = attach(session, {
        output: (b) => {
          output.textContent += dec.decode(b, { stream: true });
          if (output.textContent.length > maxOutput) output.textContent = output.textContent.slice(-maxOutput);
          output.scrollTop = output.scrollHeight;
        },
        event: (ev) => {
          if (ev.type === 'exit') output.textContent += `\n[exited ${ev.exit_code ?? ''}${ev.signal ? ` signal ${ev.signal}` : ''}]\n`;
          else if (ev.type === 'gap') output.textContent += '\n[… output dropped …]\n';
          else if (ev.type === 'error') output.textContent += `\n[${ev.code}: ${ev.message}]\n`;
        },
      });
    } catch (e) {
      ctx.showError(e);
    }
    load();
  }
  await load();
  const timer = setInterval(load, processPoll);
  return () => {
    closed = true;
    clearInterval(timer);
    if (conn) conn.close();
  };
}

// mountEgress: the sandbox's egress policy and its live decisions (the
// decisions stream, GET …/egress/decisions?follow=true).
export async function mountEgress(panel, ctx, id) {
  const h = ctx.h;
  const base = `/v1/sandboxes/${encodeURIComponent(id)}/egress`;
  const policy = h('pre', { class: 'log', testid: 'egress-policy' }, 'loading…');
  const tbody = h('tbody');
  const empty = h('tr', { class: 'empty' }, h('td', { colspan: 5 }, 'No decisions yet.'));
  tbody.appendChild(empty);
  const decisions = h('table', { class: 'table', testid: 'egress-decisions' },
    h('thead', null, h('tr', null, ['Time', 'Verdict', 'Kind', 'Destination', 'Rule / reason'].map((t) => h('th', null, t)))),
    tbody);
  const live = h('span', { class: 'muted' });
  panel.appendChild(section('Policy', policy));
  panel.appendChild(section('Decisions', live, decisions));

  try {
    const eg = await ctx.api.get(base);
    policy.textContent = JSON.stringify({ policy: eg.policy, effective: eg.effective, live: eg.live }, null, 2);
  } catch (e) {
    policy.textContent = '';
    ctx.showError(e);
  }
  let count = 0;
  const addRow = (d) => {
    empty.remove();
    const verdict = d.allowed ? 'allow' : 'deny';
    const dest = `${d.host || ''}${d.host && d.addr ? ' ' : ''}${d.addr ? `(${d.addr}${d.port ? `:${d.port}` : ''})` : (d.port ? `:${d.port}` : '')}`;
    tbody.insertBefore(h('tr', { testid: 'egress-decision', 'data-verdict': verdict },
      h('td', null, time(d.time)),
      h('td', null, badge(verdict)),
      h('td', null, d.kind),
      h('td', { class: 'mono' }, dest),
      h('td', null, [d.rule, d.reason].filter(Boolean).join(' — '))), tbody.firstChild);
    if (++count > maxDecisions) tbody.lastChild.remove();
  };
  live.textContent = 'live';
  return ctx.sse(`${base}/decisions${query({ follow: 'true' })}`, {
    decision: (data) => { try { addRow(JSON.parse(data)); } catch (e) { console.error(e); } },
    dropped: () => { live.textContent = 'live · some decisions were dropped (the log is bounded)'; },
    end: () => { live.textContent = 'the sandbox is gone'; },
    error: () => { live.textContent = 'disconnected; retrying…'; },
  });
}

// mountOperations: the sandbox's lifecycle operations, newest first.
export async function mountOperations(panel, ctx, id) {
  const h = ctx.h;
  const box = h('div');
  panel.appendChild(box);
  let closed = false;
  async function load() {
    try {
      const out = await ctx.api.get(`/v1/operations${query({ sandbox: id, limit: 100 })}`);
      if (closed) return;
      const el = table('operations-table', ['ID', 'Kind', 'State', 'Created', 'Finished', 'Error'], out.operations || [], (op) =>
        h('tr', { testid: 'operation-row', 'data-id': op.id },
          h('td', { class: 'mono' }, op.id),
          h('td', null, op.kind),
          h('td', null, badge(op.state)),
          h('td', null, time(op.created_at)),
          h('td', null, time(op.finished_at || op.completed_at)),
          h('td', null, op.error ? `${op.error.code || ''} ${op.error.message || ''}`.trim() : '')), 'No operations.');
      while (box.firstChild) box.removeChild(box.firstChild);
      box.appendChild(el);
    } catch (e) {
      if (!closed) ctx.showError(e);
    }
  }
  await load();
  const timer = setInterval(load, 3000);
  return () => { closed = true; clearInterval(timer); };
}
