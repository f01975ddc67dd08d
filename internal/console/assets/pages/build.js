// pages/build.js — one build (GET /v1/builds/{id}) and its log, streamed
// live from GET /v1/builds/{id}/log (SSE: "log" events {text, offset},
// "progress" events, a last "done" event carrying the build). The stream
// ends when the build does; an EventSource reconnect resumes at the last
// log event's id (its byte offset), so nothing is shown twice.
import { badge, section, time } from '../dom.js';
import { steps } from './templates.js';

export async function render(main, ctx, params) {
  const h = ctx.h;
  const id = params.id;
  let build = await ctx.api.get(`/v1/builds/${encodeURIComponent(id)}`);

  const info = h('dl', { class: 'kv', testid: 'build-info' });
  const status = h('span', { class: 'muted', testid: 'build-stream' }, 'connecting…');
  const log = h('pre', { class: 'log', testid: 'build-log' });
  main.appendChild(h('h1', null, 'Build ', h('span', { class: 'mono' }, build.id)));
  main.appendChild(h('p', null, h('a', { href: '#/templates' }, '← Templates')));
  main.appendChild(section('Build', info));
  main.appendChild(section('Log', h('div', { class: 'toolbar' }, status), log));
  drawInfo();

  function drawInfo(prog) {
    const b = build;
    const rows = [
      ['State', badge(prog ? prog.state : b.state, 'build-state')],
      ['Kind', b.kind],
      ['Name', b.name || ''],
      ['Source', b.source || ''],
      ['Steps', steps(prog || b)],
      ['Imported', prog && prog.entries ? `${prog.entries} entries, ${prog.bytes} bytes` : ''],
      ['Digest', b.digest ? h('span', { class: 'mono' }, b.digest) : ''],
      ['Error', b.error ? `${b.error.code}: ${b.error.message}` : ''],
      ['Attempts', String(b.attempts ?? '')],
      ['Created', time(b.created_at)],
      ['Finished', time(b.finished_at)],
    ];
    info.replaceChildren(...rows.filter(([, v]) => v !== '').flatMap(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
  }

  function append(text) {
    // Follow the end only when the reader is already there.
    const atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 24;
    log.appendChild(document.createTextNode(text));
    if (atEnd) log.scrollTop = log.scrollHeight;
  }

  function parse(data) {
    try { return JSON.parse(data); } catch { return null; }
  }

  let ended = false;
  const close = ctx.sse(`/v1/builds/${encodeURIComponent(id)}/log`, {
    log: (data) => {
      const d = parse(data);
      if (d && typeof d.text === 'string') append(d.text);
      status.textContent = 'streaming';
    },
    progress: (data) => {
      const p = parse(data);
      if (p) drawInfo(p);
      status.textContent = 'streaming';
    },
    done: (data) => {
      const b = parse(data);
      if (b) build = b;
      ended = true;
      close();
      drawInfo();
      status.textContent = `ended: ${build.state}`;
      log.scrollTop = log.scrollHeight;
    },
    error: (_ev, es) => {
      if (ended) return;
      // The browser reconnects by itself unless the answer was not a stream.
      status.textContent = es.readyState === EventSource.CLOSED ? 'stream failed' : 'reconnecting…';
      if (es.readyState === EventSource.CLOSED) ctx.showError('The build log stream failed; reload to retry.');
    },
  });
  return close;
}
