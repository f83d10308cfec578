/** The keys page (SPEC §9): the account's keys, the create form, and the dialog that shows a new key once. */
import type { KeyRecord } from '../../store/types.ts';
import { SCOPES } from '../../store/types.ts';
import { html, type Html } from '../html.ts';
import { accountPath, when } from '../layout.ts';

/** The lifetimes the operator chooses from for a member link (seconds; LINK_TTL allows 60..86400). */
export const LINK_LIFETIMES: readonly (readonly [number, string])[] = [
  [300, '5 minutes'],
  [3600, '1 hour'],
  [8 * 3600, '8 hours'],
  [86_400, '24 hours'],
];

/** What an operator sees above an account's keys: mint a member sign-in link, end the members' sessions. */
function operatorTools(account: string): Html {
  return html`<section class="panel">
    <h2>Operator</h2>
    <div class="inline-forms">
      <form class="inline" method="post" action="${accountPath(account, '/links')}">
        <label class="row"
          >Valid for
          <select name="ttl_seconds">
            ${LINK_LIFETIMES.map(([s, label]) => html`<option value="${s}" ${s === 300 ? html`selected` : ''}>${label}</option>`)}
          </select>
        </label>
        <button type="submit">Create a member sign-in link</button>
      </form>
      <form
        class="inline"
        method="post"
        action="${accountPath(account, '/sessions/end')}"
        hx-post="${accountPath(account, '/sessions/end')}"
        hx-target="#flash"
        hx-confirm="Sign every member of ${account} out of the console now?"
      >
        <button class="danger" type="submit">Sign all members out</button>
      </form>
    </div>
  </section>`;
}

/** key id → ISO minute of its last request (usage.lastUsed); a key missing from it was never used. */
export type LastUsed = Readonly<Record<string, string>>;

/** `when()` in two unbreakable halves (day, time), so the two date columns wrap between them, not mid-date. */
function stamp(iso: string): Html {
  const [day, time] = when(iso).split(/ (.*)/);
  return html`<span class="stamp">${day}</span> <span class="stamp">${time}</span>`;
}

/** One row; every action swaps the row in place with htmx, or posts and redirects without it. */
export function keyRow(account: string, k: KeyRecord, lastUsed: string | undefined): Html {
  const action = accountPath(account, `/keys/${encodeURIComponent(k.id)}`);
  const swap = html`hx-post="${action}" hx-target="closest tr" hx-swap="outerHTML"`;
  const toggle = k.active
    ? html`<form
        method="post"
        action="${action}"
        ${swap}
        hx-confirm="Disable “${k.name}”? Every request with this key is refused from now on, on every instance."
      >
        <input type="hidden" name="action" value="disable" /><button class="small danger" type="submit">Disable</button>
      </form>`
    : html`<form method="post" action="${action}" ${swap} hx-confirm="Enable “${k.name}” again? Requests with this key are accepted again.">
        <input type="hidden" name="action" value="enable" /><button class="small" type="submit">Enable</button>
      </form>`;
  return html`<tr id="key-${k.id}" class="${k.active ? '' : 'off'}" data-key-id="${k.id}">
    <td>
      <form class="inline" method="post" action="${action}" ${swap}>
        <input type="hidden" name="action" value="rename" />
        <input class="name" type="text" name="name" value="${k.name}" required maxlength="200" aria-label="Name of key ${k.id}" />
        <button class="small" type="submit">Rename</button>
      </form>
    </td>
    <td class="mono">svc-${k.env}-…${k.last4}</td>
    <td><span class="badge ${k.env}">${k.env}</span></td>
    <td class="hide-sm">${k.scopes.join(', ')}</td>
    <td class="hide-sm">${stamp(k.created_at)}</td>
    <td class="last-used"><span class="show-sm">Last used </span>${lastUsed ? stamp(lastUsed) : 'never'}</td>
    <td><span class="badge ${k.active ? 'active' : 'disabled'}">${k.active ? 'active' : 'disabled'}</span></td>
    <td class="actions">${toggle}</td>
  </tr>`;
}

/** The table of keys, swapped as a whole (out of band) after a create. */
export function keyTable(account: string, keys: readonly KeyRecord[], used: LastUsed, oob = false): Html {
  return html`<section id="key-table" class="panel flush" ${oob ? html`hx-swap-oob="true"` : ''}>
    <table class="cards">
      <thead>
        <tr>
          <th>Name</th>
          <th>Key</th>
          <th>Env</th>
          <th class="hide-sm">Scopes</th>
          <th class="hide-sm">Created</th>
          <th>Last used</th>
          <th>Status</th>
          <th class="actions"><span class="hide-sm">Actions</span></th>
        </tr>
      </thead>
      <tbody id="key-rows">
        ${
          keys.length === 0
            ? html`<tr>
                <td colspan="8" class="empty">No keys yet: create the first one above.</td>
              </tr>`
            : keys.map((k) => keyRow(account, k, used[k.id]))
        }
      </tbody>
    </table>
  </section>`;
}

/** The one-time dialog with the full key, a copy button and the handling advice. */
export function createdDialog(account: string, key: string, record: KeyRecord): Html {
  return html`<dialog id="new-key" data-modal open aria-labelledby="new-key-title">
    <h2 id="new-key-title">Your new key “${record.name}”</h2>
    <p>
      This is the only time the full key is shown. Copy it now and keep it in an environment variable or a secret store, never in source
      code, a repository or a chat message.
    </p>
    <div class="secret">
      <code id="new-key-value">${key}</code>
      <button type="button" data-copy="new-key-value">Copy</button>
    </div>
    <p class="warn">
      Tollgate keeps only a hash of this key: nobody can show it again, not even an operator. If it is lost, create a new key and disable
      this one.
    </p>
    <div class="dialog-actions">
      <a class="button primary" href="${accountPath(account, '/keys')}" data-close>I have saved it</a>
    </div>
  </dialog>`;
}

/** The page body: create form, dialog slot (filled on a create), and the table. */
export function keysBody(o: {
  account: string;
  keys: readonly KeyRecord[];
  used: LastUsed;
  operator: boolean;
  created?: Html | undefined;
  /** An account with no key and no ledger yet (an operator may have mistyped its id). */
  fresh?: boolean;
}): Html {
  const action = accountPath(o.account, '/keys');
  return html`<div class="head">
      <div>
        <h1>API keys</h1>
        <p class="sub">Keys of account <strong>${o.account}</strong>. A key is shown in full once, when it is created.</p>
      </div>
    </div>
    ${
      o.fresh
        ? html`<section class="panel confirm" id="unseen-account" role="alert">
            <h2>Account “${o.account}” does not exist yet</h2>
            <p>
              It has no keys, no credit and no ledger. If you meant another account, check the id or
              <a href="/console/accounts?q=${encodeURIComponent(o.account.slice(0, 4))}">search the accounts</a>. Creating a key here
              creates this account.
            </p>
          </section>`
        : ''
    }
    ${o.operator ? operatorTools(o.account) : ''}
    <section class="panel">
      <h2>Create a key</h2>
      <form class="stack" method="post" action="${action}" hx-post="${action}" hx-target="#dialog-slot" hx-swap="innerHTML">
        <label>Name <input type="text" name="name" required maxlength="200" placeholder="e.g. production backend" /></label>
        <label
          >Environment
          <select name="env">
            <option value="live">live: billed from credit</option>
            <option value="test">test: free, rate-limited</option>
          </select>
        </label>
        <fieldset>
          <legend>Scopes</legend>
          ${SCOPES.map((s) => html`<label><input type="checkbox" name="scopes" value="${s}" checked /> ${s}</label>`)}
        </fieldset>
        ${
          o.fresh
            ? html`<label class="row confirm-new"
                ><input type="checkbox" name="new_account" value="${o.account}" required /> Create the new account “${o.account}”</label
              >`
            : ''
        }
        <div><button class="primary" type="submit">Create key</button></div>
      </form>
    </section>
    <div id="dialog-slot">${o.created ?? ''}</div>
    ${keyTable(o.account, o.keys, o.used)}`;
}

/**
 * Said on the keys page, where the create form is, when the account is at limits.max_keys_per_account
 * (429 `key_limit_exceeded`): what happened and what to do, in words, not an error card.
 */
export function keyLimitNotice(max: number | undefined): Html {
  const limit = max === undefined ? 'keys' : max === 1 ? '1 key' : `${max} keys`;
  return html`<div id="key-limit" class="flash error" role="alert">
    <strong>No key was created: this account has reached its limit of ${limit}.</strong>
    Disabled keys count too, because they still exist. Enable a disabled key again instead of creating a new one, or ask the platform's
    operator to raise the limit.
  </div>`;
}
