// pages/admin.js — what the admin-only pages share.

// adminOnly fills main with a notice and returns true when the session is
// not an admin's (the API would answer 403 anyway).
export function adminOnly(main, ctx, title) {
  if (ctx.isAdmin) return false;
  main.appendChild(ctx.h('h1', null, title));
  main.appendChild(ctx.h('p', { class: 'muted', testid: 'admin-only' }, 'This page needs an admin key.'));
  return true;
}

// busy runs fn with button disabled, showing any error in the banner.
export async function busy(ctx, button, fn) {
  if (button) button.disabled = true;
  try {
    ctx.showError(null);
    return await fn();
  } catch (e) {
    ctx.showError(e);
    return undefined;
  } finally {
    if (button) button.disabled = false;
  }
}

// intOrZero parses an optional whole-number input ('' → 0).
export function intOrZero(input, what) {
  const v = input.value.trim();
  if (v === '') return 0;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${what} must be a whole number`);
  return n;
}
