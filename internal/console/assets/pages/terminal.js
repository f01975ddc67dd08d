// pages/terminal.js — a shell in the sandbox: xterm.js on a PTY process
// (POST /v1/sandboxes/{id}/commands with pty and stdin), wired to the data
// plane's WebSocket attach (pages/attach.js): keys as stdin, terminal
// resizes as resize messages, output written to the terminal.
import { attach } from './attach.js';

// The shell: bash when the image has it, else sh; a login shell.
const shell = ['/bin/sh', '-c', 'if command -v bash >/dev/null 2>&1; then exec bash -l; else exec /bin/sh -l; fi'];

// hangupGrace is how long a closed terminal's shell may take to exit on
// end of input before it is sent SIGHUP.
const hangupGrace = 2000;

const cssHref = '/ui/assets/vendor/xterm/xterm.css';
function loadCSS() {
  if (document.querySelector(`link[href="${cssHref}"]`)) return;
  document.head.appendChild(Object.assign(document.createElement('link'), { rel: 'stylesheet', href: cssHref }));
}

// xterm.js writes its theme and cell sizes into <style> elements, which
// the console's Content-Security-Policy (style-src 'self') refuses (and
// reports). While a terminal is opened, document.createElement('style')
// makes an inert, hidden <xterm-style> element instead, and mirrorStyles
// copies the text xterm writes into it into constructed style sheets
// adopted by the document, which the policy does not govern.
function inertStyles(fn) {
  const create = document.createElement;
  document.createElement = function createElement(tag, opts) {
    if (String(tag).toLowerCase() === 'style') {
      const el = create.call(document, 'xterm-style');
      el.hidden = true;
      return el;
    }
    return create.call(document, tag, opts);
  };
  try { return fn(); } finally { document.createElement = create; }
}

// mirrorStyles keeps one adopted style sheet per <xterm-style> element
// under roots, with its text. Returns a stop function.
function mirrorStyles(roots) {
  const sheets = new Map(); // element → CSSStyleSheet
  const sync = () => {
    const live = new Set();
    for (const root of roots) {
      for (const el of root.querySelectorAll('xterm-style')) {
        live.add(el);
        let sheet = sheets.get(el);
        if (!sheet) {
          sheet = new CSSStyleSheet();
          sheets.set(el, sheet);
          document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
        }
        try { sheet.replaceSync(el.textContent || ''); } catch (e) { console.error('terminal style', e); }
      }
    }
    for (const [el, sheet] of sheets) {
      if (!live.has(el)) {
        sheets.delete(el);
        document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => s !== sheet);
      }
    }
  };
  const obs = new MutationObserver(sync);
  for (const root of roots) obs.observe(root, { childList: true, subtree: true, characterData: true });
  return { sync, stop: () => {
    obs.disconnect();
    const gone = new Set(sheets.values());
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => !gone.has(s));
  } };
}

// mountTerminal fills panel with a terminal running a shell in sandbox id
// and returns the cleanup (hang up the shell, close the socket). It runs
// only when the user opens the Terminal tab, and starts a shell only in a
// running sandbox: it never resumes or wakes one (the page's buttons do).
export async function mountTerminal(panel, ctx, id) {
  const h = ctx.h;
  const sb = await ctx.api.get(`/v1/sandboxes/${encodeURIComponent(id)}`);
  if (sb.state !== 'running') {
    const what = sb.state === 'paused' || sb.state === 'suspended'
      ? `The sandbox is ${sb.state}: resume it with the page's ${sb.state === 'paused' ? 'Resume' : 'Wake'} button above, then open the terminal again.`
      : `The sandbox is ${sb.state}: a shell starts only in a running sandbox.`;
    panel.appendChild(h('div', { class: 'muted', testid: 'terminal-status' }, what));
    return null;
  }
  loadCSS();
  const status = h('div', { class: 'muted', testid: 'terminal-status' }, 'starting a shell…');
  const box = h('div', { class: 'terminal', testid: 'terminal' });
  box.style.height = '420px'; // CSSOM, which the style-src policy allows (fit needs a height)
  panel.appendChild(box);
  panel.appendChild(status);
  const [{ Terminal }, { FitAddon }] = await Promise.all([
    import('../vendor/xterm/xterm.mjs'),
    import('../vendor/xterm/addon-fit.mjs'),
  ]);

  const mirror = mirrorStyles([box, document.head]);
  const stopMirror = mirror.stop;
  const term = new Terminal({ cursorBlink: true, fontSize: 13, scrollback: 5000 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  inertStyles(() => term.open(box));
  mirror.sync();
  try { fit.fit(); } catch { /* not laid out yet */ }

  let conn = null;
  let ended = false;
  let exited = false;
  const disposers = [];
  // cleanup hangs the shell up: end of input first (^D, after whatever was
  // typed, so a command just entered still runs), then SIGHUP if the shell
  // has not exited within hangupGrace (a program in the foreground).
  const cleanup = () => {
    ended = true;
    for (const d of disposers) { try { d(); } catch { /* gone */ } }
    if (conn) {
      const c = conn;
      c.eof();
      setTimeout(() => {
        if (!exited) c.signal('HUP');
        setTimeout(() => c.close(), 250);
      }, exited ? 0 : hangupGrace);
    }
    term.dispose();
    stopMirror();
  };

  let session;
  try {
    session = await ctx.api.post(`/v1/sandboxes/${encodeURIComponent(id)}/commands`, {
      args: shell,
      pty: { rows: term.rows, cols: term.cols },
      stdin: true,
      env: { TERM: 'xterm-256color' },
    });
  } catch (e) {
    status.textContent = `could not start a shell: ${e.code ? `${e.code}: ` : ''}${e.message}`;
    ctx.showError(e);
    return cleanup;
  }
  conn = attach(session, {
    output: (bytes) => { if (!ended) term.write(bytes); },
    event: (ev) => {
      if (ev.type === 'exit') exited = true;
      if (ended) return;
      if (ev.type === 'exit') {
        status.textContent = `the shell exited (code ${ev.exit_code ?? '?'}${ev.signal ? `, signal ${ev.signal}` : ''})`;
        term.write(`\r\n[exited ${ev.exit_code ?? ''}]\r\n`);
      } else if (ev.type === 'error') {
        status.textContent = `${ev.code}: ${ev.message}`;
      } else if (ev.type === 'reconnect') {
        status.textContent = 'the server is shutting down; open the tab again to reconnect';
      }
    },
    close: () => { if (!ended && !status.textContent.startsWith('the shell exited')) status.textContent = 'disconnected'; },
  });
  status.textContent = `shell ${session.process_id}`;
  const onData = term.onData((d) => conn.sendInput(d));
  const onResize = term.onResize(({ rows, cols }) => conn.resize(rows, cols));
  disposers.push(() => onData.dispose(), () => onResize.dispose());
  const refit = () => { try { fit.fit(); } catch { /* hidden */ } };
  window.addEventListener('resize', refit);
  disposers.push(() => window.removeEventListener('resize', refit));
  term.focus();
  return cleanup;
}
