// pages/files.js — a sandbox's files: list a directory (GET …/files/list),
// download a file and upload into the directory through data-plane
// transfers (POST …/files/transfers, then GET or PUT the returned URL with
// its token).
//
// Only the newest list request draws: an older one answering later (the
// page's first list of / after the user asked for another directory) is
// dropped. An upload goes into the directory the user asked for last: it
// waits for that list to answer first (cwd is the directory shown), then
// lists that directory again, which shows the file (the data plane answers
// an upload only once the file is in place).
import { bytes, time } from '../dom.js';

function join(dir, name) {
  return dir.endsWith('/') ? dir + name : `${dir}/${name}`;
}

function parent(dir) {
  const p = dir.replace(/\/+$/, '');
  const i = p.lastIndexOf('/');
  return i <= 0 ? '/' : p.slice(0, i);
}

export async function mountFiles(panel, ctx, id) {
  const h = ctx.h;
  const base = `/v1/sandboxes/${encodeURIComponent(id)}/files`;
  const pathIn = h('input', { type: 'text', testid: 'files-path', value: '/', class: 'mono', size: 50 });
  const upload = h('input', { type: 'file', testid: 'files-upload', multiple: true });
  const status = h('span', { class: 'muted' });
  const tbody = h('tbody');
  const list = h('table', { class: 'table', testid: 'files-list' },
    h('thead', null, h('tr', null, ['Name', 'Type', 'Size', 'Mode', 'Modified', ''].map((t) => h('th', null, t)))),
    tbody);
  panel.appendChild(h('div', { class: 'toolbar' },
    h('label', { class: 'field' }, h('span', null, 'Directory (Enter lists)'), pathIn),
    h('button', { type: 'button', class: 'secondary', onclick: () => load(parent(cwd)) }, 'Up'),
    h('label', { class: 'field' }, h('span', null, 'Upload into it'), upload),
    status));
  panel.appendChild(list);

  let cwd = '/'; // the directory the table shows
  let closed = false;
  let seq = 0; // the newest list request's number
  let loading = null; // the newest list request while it runs

  // load lists dir (default: the path field's) and draws it, unless a newer
  // list was asked for meanwhile (then its answer, or error, is dropped).
  function load(dir = pathIn.value) {
    const my = ++seq;
    const p = listDir(my, dir.trim() || '/').finally(() => {
      if (loading === p) loading = null;
    });
    loading = p;
    return p;
  }

  async function listDir(my, dir) {
    pathIn.value = dir;
    ctx.showError(null);
    try {
      const out = await ctx.api.get(`${base}/list?path=${encodeURIComponent(dir)}`);
      if (closed || my !== seq) return;
      cwd = out.path || dir;
      pathIn.value = cwd;
      draw(out);
    } catch (e) {
      if (!closed && my === seq) ctx.showError(e);
    }
  }

  // settled waits until no list request runs (a newer one may start while
  // an older one is awaited).
  async function settled() {
    while (loading) await loading;
  }

  function draw(out) {
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
    const entries = [...(out.entries || [])].sort((a, b) =>
      (a.type === 'directory' ? 0 : 1) - (b.type === 'directory' ? 0 : 1) || a.name.localeCompare(b.name));
    for (const f of entries) {
      const full = f.path || join(cwd, f.name);
      const name = f.type === 'directory'
        ? h('a', { href: '#', onclick: (ev) => { ev.preventDefault(); load(full); } }, `${f.name}/`)
        : h('span', null, f.type === 'symlink' && f.link_target ? `${f.name} → ${f.link_target}` : f.name);
      const dl = f.type === 'file'
        ? h('button', { type: 'button', class: 'secondary small', testid: 'file-download', onclick: () => download(full, f.name) }, 'Download')
        : null;
      tbody.appendChild(h('tr', { testid: 'file-row', 'data-name': f.name },
        h('td', { class: 'mono' }, name),
        h('td', null, f.type),
        h('td', { class: 'num' }, f.type === 'file' ? bytes(f.size) : ''),
        h('td', { class: 'mono' }, (f.mode ?? 0).toString(8).padStart(4, '0')),
        h('td', null, time(f.mod_time)),
        h('td', { class: 'actions' }, dl)));
    }
    if (entries.length === 0) tbody.appendChild(h('tr', { class: 'empty' }, h('td', { colspan: 6 }, 'Empty directory.')));
    status.textContent = out.truncated ? 'only the first 10000 entries are shown' : '';
  }

  // download asks for a transfer and lets the browser fetch its URL (the
  // data plane answers it as an attachment, sandboxed, never rendered).
  async function download(path, name) {
    ctx.showError(null);
    try {
      const tr = await ctx.api.post(`${base}/transfers`, { path, direction: 'download' });
      const url = `${tr.url}${tr.url.includes('?') ? '&' : '?'}token=${encodeURIComponent(tr.token)}`;
      const a = h('a', { href: url, download: name, hidden: true });
      panel.appendChild(a);
      a.click();
      a.remove();
    } catch (e) {
      ctx.showError(e);
    }
  }

  upload.addEventListener('change', async () => {
    const files = [...(upload.files || [])];
    if (files.length === 0) return;
    // Into the directory asked for last, once it answered: before, cwd
    // still named the one shown until then (the file went there, and the
    // list after the upload showed the other, without it).
    await settled();
    if (closed) return;
    ctx.showError(null);
    const dir = cwd;
    try {
      for (const file of files) {
        status.textContent = `uploading ${file.name}…`;
        const tr = await ctx.api.post(`${base}/transfers`, { path: join(dir, file.name), direction: 'upload' });
        const res = await fetch(tr.url, {
          method: tr.method || 'PUT',
          headers: { Authorization: `Bearer ${tr.token}`, 'Content-Type': 'application/octet-stream' },
          body: file,
          credentials: 'omit',
        });
        if (!res.ok) {
          let msg = `${res.status} ${res.statusText}`;
          try { const b = await res.json(); if (b && b.message) msg = `${b.code}: ${b.message}`; } catch { /* not JSON */ }
          throw new Error(`upload of ${file.name}: ${msg}`);
        }
      }
      status.textContent = `uploaded ${files.length} file${files.length === 1 ? '' : 's'}`;
    } catch (e) {
      status.textContent = '';
      ctx.showError(e);
    } finally {
      upload.value = '';
    }
    // The directory uploaded into, listed again (unless the user went
    // elsewhere meanwhile: that list is the newer one).
    await settled();
    if (!closed && cwd === dir) await load(dir);
  });
  pathIn.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter') { ev.preventDefault(); load(); }
  });
  await load();
  return () => { closed = true; };
}
