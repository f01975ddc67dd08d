// dom.js — a tiny safe DOM builder and the few view helpers the pages share.
// Nothing here ever parses HTML: API data only ever becomes text nodes or
// attribute values.

// h(tag, attrs, ...children) builds an element. attrs: testid → data-testid,
// on<event> → addEventListener(<event>), true → empty attribute, null,
// undefined and false are skipped, anything else → setAttribute. The
// properties value and checked are set as properties (what a form shows).
// Children: strings and numbers become text nodes, nodes are appended,
// arrays are flattened, null/undefined/false are skipped.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (name === 'testid') {
      el.setAttribute('data-testid', String(v));
    } else if (name.startsWith('on') && typeof v === 'function') {
      el.addEventListener(name.slice(2).toLowerCase(), v);
    } else if (name === 'value' || name === 'checked') {
      el[name] = v;
    } else {
      el.setAttribute(name, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// clear empties an element.
export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
}

// badge is a state shown as a colored badge (class state-<state>).
export function badge(state, testid) {
  const s = String(state || 'unknown');
  return h('span', { class: `badge state-${s.replace(/[^a-z0-9_-]/gi, '')}`, testid }, s);
}

// table builds a table with a header row and one row per item; row(item)
// returns the <tr>. empty is shown as one row when there are no items.
export function table(testid, headers, items, row, empty = 'None.') {
  const body = h('tbody', null, items.map(row));
  if (items.length === 0) {
    body.appendChild(h('tr', { class: 'empty' }, h('td', { colspan: headers.length }, empty)));
  }
  return h('table', { testid, class: 'table' },
    h('thead', null, h('tr', null, headers.map((t) => h('th', null, t)))),
    body);
}

// time formats an RFC 3339 timestamp in the browser's locale ('' for none).
export function time(ts) {
  if (!ts) return '';
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return String(ts);
  return d.toLocaleString();
}

// bytes formats a byte count with a binary unit.
export function bytes(n) {
  if (n === null || n === undefined) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Number(n);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}

// field is a labelled form control.
export function field(label, control) {
  return h('label', { class: 'field' }, h('span', null, label), control);
}

// section is a titled block of a page.
export function section(title, ...children) {
  return h('section', { class: 'section' }, h('h2', null, title), children);
}
