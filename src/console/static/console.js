// The console's own script (CSP: script-src 'self', nothing inline): the copy button, the key dialog's
// modal behaviour and its removal on close, so a shown key leaves the page (and any snapshot) at once.
'use strict';

function openDialogs(root) {
  for (const d of root.querySelectorAll('dialog[data-modal]')) {
    if (!d.open) d.showModal();
    else if (!d.matches(':modal')) {
      // Rendered open for browsers without JavaScript; reopen it as a modal. close() fires a 'close'
      // event later: mark it so the listener below keeps this dialog.
      d.dataset.reopening = '';
      d.close();
      d.showModal();
    }
  }
}

document.addEventListener('click', async (ev) => {
  const copy = ev.target.closest('[data-copy]');
  if (copy) {
    const source = document.getElementById(copy.dataset.copy);
    if (!source) return;
    try {
      await navigator.clipboard.writeText(source.textContent.trim());
      copy.textContent = 'Copied';
    } catch {
      // No clipboard (insecure origin, denied): select the text so the user can copy it by hand.
      getSelection().selectAllChildren(source);
      copy.textContent = 'Press Ctrl+C';
    }
    copy.classList.add('done');
    return;
  }
  const close = ev.target.closest('[data-close]');
  if (close) {
    const dialog = close.closest('dialog');
    if (dialog) {
      ev.preventDefault();
      dialog.close();
      dialog.remove();
    }
  }
});

// Escape closes a modal dialog: remove it too, never just hide it.
document.addEventListener(
  'close',
  (ev) => {
    const d = ev.target;
    if (!(d instanceof HTMLDialogElement) || d.dataset.modal === undefined) return;
    if (d.dataset.reopening !== undefined) delete d.dataset.reopening;
    else d.remove();
  },
  true,
);

document.addEventListener('DOMContentLoaded', () => openDialogs(document));
document.addEventListener('htmx:afterSettle', (ev) => openDialogs(ev.detail.elt.ownerDocument));
