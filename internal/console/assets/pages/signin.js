// pages/signin.js — sign in with an API key (POST /ui/session). The key goes
// into an HttpOnly cookie; the page never stores it.
import { request } from '../api.js';

export async function render(main, ctx) {
  const h = ctx.h;
  const key = h('input', {
    type: 'password', testid: 'signin-key', name: 'key', autocomplete: 'current-password',
    placeholder: 'alk_…', required: true, autofocus: true,
  });
  const submit = h('button', { type: 'submit', testid: 'signin-submit' }, 'Sign in');
  const form = h('form', { class: 'signin', onsubmit: onSubmit },
    h('h1', null, 'Airlock console'),
    h('p', { class: 'muted' }, 'Sign in with an API key. The key is kept in an HttpOnly session cookie.'),
    h('label', { class: 'field' }, h('span', null, 'API key'), key),
    h('div', { class: 'actions' }, submit));
  main.appendChild(form);
  key.focus();

  let busy = false;
  async function onSubmit(ev) {
    ev.preventDefault();
    if (busy) return;
    const value = key.value.trim();
    if (!value) {
      ctx.showError('Enter an API key.');
      return;
    }
    busy = true;
    submit.disabled = true;
    ctx.showError(null);
    try {
      // Not ctx.api: a refused key (401) must stay here and show why.
      const s = await request('POST', '/ui/session', { body: { key: value } });
      key.value = '';
      ctx.signedIn(s);
    } catch (e) {
      ctx.showError(e.status === 401 ? `${e.code}: ${e.message}` : e);
      key.select();
    } finally {
      busy = false;
      submit.disabled = false;
    }
  }
}
