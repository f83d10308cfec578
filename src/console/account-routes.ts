/**
 * The account pages and their actions (SPEC §9): keys, credit, shares, and the operator's account list,
 * grants, member links and "sign all members out". Each action calls the service the JSON admin API
 * calls (keys: KeyTable, credit: AccountService, shares: ShareService, links: ConsoleSessions): two
 * front doors, one implementation.
 */
import type { ShareRecord } from '../store/types.ts';
import { setImmediate as turn } from 'node:timers/promises';
import type { RequestContext } from '../http/context.ts';
import { GatewayError, ValidationError } from '../http/errors.ts';
import type { Route } from '../http/router.ts';
import { Issues, literal, query, str } from '../http/validate.ts';
import { ENTRY_ID, MAX_GRANT } from '../admin/accounts.ts';
import type { AccountService } from '../admin/account-service.ts';
import type { KeyTable } from '../auth/key-table.ts';
import type { ShareService } from '../shares/service.ts';
import type { Usage } from '../usage/usage.ts';
import { SCOPES, type KeyRecord, type Scope, type Store } from '../store/types.ts';
import { creditsToMicros } from '../credit/money.ts';
import { html, type Html } from './html.ts';
import { accountPath, page, sendHtml, type SectionId } from './layout.ts';
import type { Assets } from './assets.ts';
import { fields, readForm } from './forms.ts';
import type { ProcessBodyBudget } from '../limits/body-budget.ts';
import type { AccountGate } from '../limits/account-gate.ts';
import { LINK_TTL, type ConsoleSessions, type Viewer } from './sessions.ts';
import { isHtmx, notFound, redirect, type SignedIn } from './access.ts';
import {
  DEFAULT_LISTING,
  KEY_FIRST_DIR,
  KEY_SORTS,
  ROLL_GRACES,
  createdDialog,
  filterKeys,
  keyDetailBody,
  keyDailyLimitNotice,
  keyLimitNotice,
  keyRow,
  keyTable,
  keysBody,
  sortKeys,
  type KeyListing,
  type KeyView,
} from './pages/keys.ts';
import { budgetView } from '../credit/budget.ts';
import { BUDGET_PERIODS } from '../store/types.ts';
import { expiresAtField } from '../admin/key-controls.ts';
import { CSV_HEADER, creditBody, csvLine, type GrantDraft } from './pages/credit.ts';
import { shareRow, sharesBody } from './pages/shares.ts';
import { ACCOUNT_SORTS, accountsBody, linkBody, sortAccounts, type AccountSummary } from './pages/accounts.ts';
import { lastDays, usageBody } from './pages/usage.ts';

export interface AccountRouteDeps {
  sessions: ConsoleSessions;
  keys: KeyTable;
  accounts: AccountService;
  shares: ShareService;
  store: Store;
  /** The usage aggregates' read service (the admin API's GET …/usage), and each key's last use. */
  usage: Usage;
  now: () => number;
  assets: Assets;
  signedIn: SignedIn;
  /** Console grants above this many micro-credits (absolute) are confirmed first (console.confirm_grant_credits). */
  confirmGrantMicros: number;
  /** What form posts are read under, per account (the operator's sessions share one): setup.ts. */
  forms: ProcessBodyBudget;
  /** A member's console work at once, per account (setup.ts; signedIn runs each handler through it). */
  gate: AccountGate;
}

const LEDGER_PAGE = 50;
const CSV_BATCH = 1000;
const SHARES_SHOWN = 200;
/**
 * The shares page reads titles from the snapshot objects (Redis holds no user content), newest live shares
 * first, while their snapshot bytes (the record's size) add up to at most this many, SHARE_TITLE_READS at a
 * time; the others show no title. Before, it read all 200 listed snapshots at once and parsed each: 100
 * shares of 1 MB (a member publishes those within its quota) held the event loop ~0.8 s and took ~110 MB
 * of heap per page load, /healthz waiting as long.
 */
export const SHARE_TITLE_BYTES = 4 * 1024 * 1024;
const SHARE_TITLE_READS = 4;
const USAGE_DAYS = 30;
/**
 * The usage page reads the newest of its days whose stored counters (HLEN, before any read) add up to at
 * most this many, and says the older ones are left out: a member can grow an account's day hashes without
 * bound (a test key created, used and deleted per request), and reading them all for each page load took
 * Redis ~290 ms per HGETALL of a 500,000-field day (every tenant waits) and ~3 s of the gateway's time.
 * 50,000 counters are at least 10,000 day × key × model rows.
 */
export const USAGE_PAGE_MAX_FIELDS = 50_000;
/** The account list reads and shows at most this many accounts (the first by name), ACCOUNT_READS at a time. */
const ACCOUNTS_SHOWN = 100;
const ACCOUNT_READS = 16;
const SLUG = /^[1-9A-HJ-NP-Za-km-z]{22}$/;
/** The key page's notice after a change (`?saved=`). */
const SAVED: Record<string, string> = { budget: 'The budget was saved.', expiry: 'The expiry was saved.' };

/** `fn` over `items`, at most `limit` at once, results in order: a page's reads never flood the store. */
async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/**
 * Resolves when a full response can take more (drain) or is gone (close), leaving no listener behind; at
 * once when it is gone already (its 'close' was emitted before: a client that left while a page was read).
 */
function writable(res: RequestContext['res']): Promise<void> {
  if (res.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

export function accountRoutes(d: AccountRouteDeps): Route[] {
  const { assets, signedIn } = d;
  const show = (ctx: RequestContext, viewer: Viewer, title: string, section: SectionId, body: Html, account?: string, status = 200) =>
    sendHtml(ctx.res, status, page(assets, { title, viewer, account, section, body }));

  /** The key of this account with this id, or 404 (another account's key is not found either). */
  async function ownKey(account: string, id: string): Promise<KeyRecord> {
    const k = await d.keys.get(id);
    if (!k || k.account !== account) throw notFound('key');
    return k;
  }

  /** True when the account has no key and no ledger entry: never granted, never given a key (maybe a typo). */
  async function unseen(account: string, keys?: readonly KeyRecord[]): Promise<boolean> {
    if ((keys ?? (await d.keys.list(account))).length > 0) return false;
    return (await d.accounts.recent(account, undefined, 1)).length === 0;
  }

  /** Each key with its last use and its budget's spend (one counter read per budgeted key, in parallel). */
  async function keyViews(account: string, records?: readonly KeyRecord[]): Promise<KeyView[]> {
    const [keys, used] = await Promise.all([records ?? d.keys.list(account), d.usage.lastUsed(account)]);
    const at = d.now();
    const budgets = await Promise.all(keys.map((r) => budgetView(d.store, r, at)));
    return keys.map((record, i) => ({ record, lastUsed: used[record.id], budget: budgets[i]! }));
  }

  async function keyView(record: KeyRecord): Promise<KeyView> {
    const [used, budget] = await Promise.all([d.usage.lastUsed(record.account), budgetView(d.store, record, d.now())]);
    return { record, lastUsed: used[record.id], budget };
  }

  /** `?q=&sort=&dir=` of the keys page; anything unknown falls back to the default order (newest first). */
  function listing(url: string): KeyListing {
    const q = query(url);
    const search = typeof q.q === 'string' ? q.q.trim().slice(0, 200) : '';
    const sort = KEY_SORTS.find((s) => s === q.sort);
    if (!sort) return { ...DEFAULT_LISTING, q: search };
    return { q: search, sort, dir: q.dir === 'asc' || q.dir === 'desc' ? q.dir : KEY_FIRST_DIR[sort] };
  }

  async function keysPage(ctx: RequestContext, viewer: Viewer, account: string, created?: Html, status = 200) {
    const keys = await d.keys.list(account);
    const all = await keyViews(account, keys);
    const get = ctx.req.method === 'GET';
    const l = get ? listing(ctx.req.url!) : DEFAULT_LISTING;
    const views = sortKeys(filterKeys(all, l.q), l.sort, l.dir, d.now());
    const operator = viewer.account === null;
    // An operator may open any valid id (accounts exist implicitly); one that was never seen is said so,
    // and creating a key in it needs a confirmation. A member's account was chosen by the platform.
    const fresh = operator && (await unseen(account, keys));
    const notice = get && query(ctx.req.url!).deleted === '1' ? 'The key was deleted.' : undefined;
    const body = keysBody({ account, views, total: all.length, listing: l, nowMs: d.now(), notice, operator, created, fresh });
    show(ctx, viewer, 'API keys', 'keys', body, account, status);
  }

  async function createKey(ctx: RequestContext, viewer: Viewer, account: string, form: URLSearchParams) {
    const issues = new Issues();
    const o = fields(form, ['name', 'env', 'new_account']);
    const name = str(o, 'name', ['form'], issues, { required: true, minLength: 1, maxLength: 200 });
    const env = literal(o, 'env', ['live', 'test'] as const, ['form'], issues, true);
    const scopes = form.getAll('scopes');
    for (let i = 0; i < scopes.length && !issues.full; i++) literal({ [i]: scopes[i] }, String(i), SCOPES, ['form', 'scopes'], issues);
    if (scopes.length === 0) issues.add(['form', 'scopes'], 'too_short', 'Choose at least one scope', scopes);
    if (viewer.account === null && o.new_account !== account && (await unseen(account)))
      issues.add(
        ['form', 'new_account'],
        'missing',
        `Account “${account}” has no keys or credit yet: confirm that you mean to create it`,
        null,
      );
    issues.done();
    let created: Awaited<ReturnType<KeyTable['create']>>;
    try {
      created = await d.keys.create({ account, env: env!, name: name!, scopes: [...new Set(scopes)] as Scope[] });
    } catch (e) {
      if (!(e instanceof GatewayError && e.code === 'key_limit_exceeded')) throw e;
      // Said on the keys page, in words (SPEC §13), with the code kept for scripts and logs. Only the daily
      // bound's refusal carries retry-after (key-table.ts): which of the two limits it was.
      ctx.res.setHeader('x-error-code', e.code);
      for (const h in e.headers) ctx.res.setHeader(h, e.headers[h]!);
      const notice = e.headers?.['retry-after'] ? keyDailyLimitNotice(d.keys.maxMadePerDay) : keyLimitNotice(d.keys.maxPerAccount);
      return isHtmx(ctx) ? sendHtml(ctx.res, e.status, notice) : keysPage(ctx, viewer, account, notice, e.status);
    }
    const { key, record } = created;
    ctx.log.key_id = record.id;
    const dialog = createdDialog(account, key, record);
    // The one response that carries the full key (SPEC §9): a fragment for htmx (the dialog, plus the
    // refreshed table out of band), the whole page without JavaScript. Never a redirect target.
    if (isHtmx(ctx)) return sendHtml(ctx.res, 201, html`${dialog}${keyTable(account, await keyViews(account), d.now(), { oob: true })}`);
    await keysPage(ctx, viewer, account, dialog, 201);
  }

  const KEY_ACTIONS = ['rename', 'disable', 'enable', 'budget', 'unbudget', 'expire', 'unexpire', 'expire_now', 'roll', 'delete'] as const;

  async function keyPage(ctx: RequestContext, viewer: Viewer, account: string) {
    const k = await ownKey(account, ctx.params.id!);
    const saved = query(ctx.req.url!).saved;
    const notice = typeof saved === 'string' && Object.hasOwn(SAVED, saved) ? SAVED[saved] : undefined;
    show(ctx, viewer, `Key ${k.name}`, 'keys', keyDetailBody({ account, view: await keyView(k), nowMs: d.now(), notice }), account);
  }

  /**
   * Every change of a key: rename, disable, enable (the keys table's in-row actions, swapped by htmx),
   * and the key page's budget, expiry, roll and delete. Each is the KeyTable call the admin API's PATCH,
   * roll and DELETE make, so it reaches every instance the same way.
   */
  async function changeKey(ctx: RequestContext, viewer: Viewer, account: string, form: URLSearchParams) {
    const current = await ownKey(account, ctx.params.id!);
    const issues = new Issues();
    const o = fields(form, ['action', 'name', 'limit', 'period', 'expires_at', 'grace_seconds', 'confirm']);
    const action = literal(o, 'action', KEY_ACTIONS, ['form'], issues, true);
    const name = action === 'rename' ? str(o, 'name', ['form'], issues, { required: true, minLength: 1, maxLength: 200 }) : undefined;
    let limit: number | undefined;
    if (action === 'budget') {
      const text = str(o, 'limit', ['form'], issues, { required: true, minLength: 1, maxLength: 40 });
      if (text) {
        try {
          limit = creditsToMicros(text);
          if (limit < 0) issues.add(['form', 'limit'], 'greater_than_equal', 'The limit must not be negative', text);
        } catch (e) {
          issues.add(['form', 'limit'], 'decimal_parsing', (e as Error).message, text);
        }
      }
    }
    const period = action === 'budget' ? literal(o, 'period', BUDGET_PERIODS, ['form'], issues, true) : undefined;
    // A datetime-local input sends no zone (`2026-11-27T18:00`): the form says UTC, so it is read as UTC.
    const at = typeof o.expires_at === 'string' ? o.expires_at : '';
    // A time already past is refused (422 beside the form): "Expire now" is the button for that, and a
    // mistyped year must not end the key at once.
    const expiresAt =
      action === 'expire' ? expiresAtField({ expires_at: /(Z|[+-]\d{2}:\d{2})$/.test(at) ? at : `${at}Z` }, issues, d.now()) : undefined;
    const grace = action === 'roll' ? Number(o.grace_seconds) : 0;
    if (action === 'roll' && !ROLL_GRACES.some(([s]) => s === grace))
      issues.add(['form', 'grace_seconds'], 'literal_error', `One of ${ROLL_GRACES.map(([s]) => s).join(', ')}`, o.grace_seconds);
    // A refused key-page form comes back as the key page (422), the message beside its form, what was typed kept.
    const section = action === 'budget' ? 'budget' : action === 'expire' ? 'expiry' : action === 'roll' ? 'roll' : undefined;
    if (section && issues.list.length > 0) {
      const message = issues.list.map((i) => i.msg).join('; ');
      const typed = section === 'budget' ? o.limit : section === 'expiry' ? o.expires_at : undefined;
      const refused = { section, message, typed: typeof typed === 'string' ? typed.slice(0, 40) : undefined } as const;
      const body = keyDetailBody({ account, view: await keyView(current), nowMs: d.now(), refused });
      return show(ctx, viewer, `Key ${current.name}`, 'keys', body, account, 422);
    }
    issues.done();
    const id = current.id;
    ctx.log.key_id = id;

    if (action === 'delete') {
      // The confirmation step: the first post asks (the key page with the question), the second deletes.
      if (o.confirm !== id) {
        const body = keyDetailBody({ account, view: await keyView(current), nowMs: d.now(), confirmDelete: true });
        return show(ctx, viewer, `Key ${current.name}`, 'keys', body, account);
      }
      if (!(await d.keys.delete(id))) throw notFound('key');
      return redirect(ctx, `${accountPath(account, '/keys')}?deleted=1`);
    }
    if (action === 'roll') {
      let r: Awaited<ReturnType<KeyTable['roll']>>;
      try {
        r = await d.keys.roll(id, grace);
      } catch (e) {
        if (!(e instanceof GatewayError && (e.code === 'key_limit_exceeded' || e.code === 'key_not_rollable'))) throw e;
        // A roll makes a key, so the daily bound refuses it too; a key already rolled (its successor named)
        // or expired is not rolled (409): each said beside the roll form, the key unchanged.
        ctx.res.setHeader('x-error-code', e.code);
        for (const h in e.headers) ctx.res.setHeader(h, e.headers[h]!);
        const body = keyDetailBody({
          account,
          view: await keyView(current),
          nowMs: d.now(),
          refused: { section: 'roll', message: e.message },
        });
        return show(ctx, viewer, `Key ${current.name}`, 'keys', body, account, e.status);
      }
      if (!r) throw notFound('key');
      ctx.log.key_id = r.record.id;
      // Like a create: the one response that carries the new key in full, never a redirect target.
      return keysPage(ctx, viewer, account, createdDialog(account, r.key, r.record, r.previous), 201);
    }
    const patch =
      action === 'rename'
        ? { name: name! }
        : action === 'disable' || action === 'enable'
          ? { active: action === 'enable' }
          : action === 'budget'
            ? { budget: { limit_micros: limit!, period: period! } }
            : action === 'unbudget'
              ? { budget: null }
              : action === 'expire'
                ? { expires_at: expiresAt! }
                : action === 'expire_now'
                  ? { expires_at: new Date(d.now()).toISOString() }
                  : { expires_at: null };
    const r = await d.keys.update(id, patch);
    if (!r) throw notFound('key');
    if (action === 'rename' || action === 'disable' || action === 'enable') {
      if (isHtmx(ctx)) return sendHtml(ctx.res, 200, keyRow(account, await keyView(r), d.now()));
      return redirect(ctx, accountPath(account, '/keys'));
    }
    const saved = action === 'budget' || action === 'unbudget' ? 'budget' : 'expiry';
    redirect(ctx, `${accountPath(account, `/keys/${encodeURIComponent(id)}`)}?saved=${saved}`);
  }

  async function creditPage(ctx: RequestContext, viewer: Viewer, account: string, draft?: GrantDraft, status = 200) {
    const q = query(ctx.req.url!);
    const issues = new Issues();
    const before = draft ? undefined : str(q, 'before', ['query'], issues, { pattern: ENTRY_ID, patternText: ENTRY_ID.source });
    issues.done();
    const [state, entries, keys] = await Promise.all([
      d.accounts.show(account),
      d.accounts.recent(account, before, LEDGER_PAGE),
      d.keys.list(account),
    ]);
    const body = creditBody({
      account,
      state,
      entries,
      older: entries.length === LEDGER_PAGE ? entries.at(-1)!.id : undefined,
      paged: before !== undefined,
      operator: viewer.account === null,
      notice:
        draft === undefined && q.granted === 'new'
          ? 'Credit granted.'
          : draft === undefined && q.granted === 'replay'
            ? 'This grant was already made; nothing was added twice.'
            : undefined,
      draft,
      fresh: viewer.account === null && before === undefined && keys.length === 0 && entries.length === 0,
      confirmAboveMicros: d.confirmGrantMicros,
      keyNames: new Map(keys.map((k) => [k.id, k])),
    });
    show(ctx, viewer, 'Credit', 'credit', body, account, status);
  }

  /**
   * A grant from the credit page's form. A refused one draws the page again (422) with what was typed
   * and the message beside its field; one above console.confirm_grant_credits, or to an account with no
   * key and no ledger yet, draws it with a confirmation first, and is booked when posted again with
   * `confirm` equal to its micro-credits.
   */
  async function grant(ctx: RequestContext, viewer: Viewer, account: string, form: URLSearchParams) {
    const issues = new Issues();
    const o = fields(form, ['amount', 'note', 'idempotency_key', 'confirm']);
    const text = str(o, 'amount', ['form'], issues, { required: true, minLength: 1, maxLength: 40 });
    const note = str(o, 'note', ['form'], issues, { maxLength: 1000 });
    const idem = str(o, 'idempotency_key', ['form'], issues, { required: true, minLength: 1, maxLength: 200 });
    let micros: number | undefined;
    if (text) {
      try {
        micros = creditsToMicros(text);
        if (Math.abs(micros) > MAX_GRANT) issues.add(['form', 'amount'], 'less_than_equal', `At most ${MAX_GRANT / 1e6} credits`, text);
        else if (micros === 0) issues.add(['form', 'amount'], 'value_error', 'The amount must not be zero', text);
      } catch (e) {
        issues.add(['form', 'amount'], 'decimal_parsing', (e as Error).message, text);
      }
    }
    const typed = (f: string) => (typeof o[f] === 'string' ? (o[f] as string).slice(0, 1000) : '');
    const draft = (errors: Record<string, string>, confirm?: number, newAccount?: boolean): GrantDraft => ({
      amount: typed('amount').slice(0, 40),
      note: typed('note'),
      idempotencyKey: idem ?? '',
      errors,
      confirm,
      newAccount,
    });
    if (issues.list.length > 0) {
      const errors: Record<string, string> = {};
      for (const i of issues.list) {
        const field = i.loc[1] === 'amount' || i.loc[1] === 'note' ? i.loc[1] : 'form';
        errors[field] ??= field === 'form' ? `${i.loc.slice(1).join('.')}: ${i.msg}` : i.msg;
      }
      return creditPage(ctx, viewer, account, draft(errors), 422);
    }
    // Not yet confirmed for this amount: a large one, or one that would create an account never seen.
    if (o.confirm !== String(micros)) {
      const fresh = await unseen(account);
      if (fresh || Math.abs(micros!) > d.confirmGrantMicros) return creditPage(ctx, viewer, account, draft({}, micros, fresh));
    }
    let r;
    try {
      r = await d.accounts.grant(account, micros!, idem, note);
    } catch (e) {
      // The balance would leave the exactly-representable range (account-service.ts): nothing was granted.
      if (e instanceof ValidationError) return creditPage(ctx, viewer, account, draft({ amount: e.detail[0]!.msg }), 422);
      throw e;
    }
    ctx.log.entry_id = r.entry_id;
    redirect(ctx, `${accountPath(account, '/credit')}?granted=${r.replayed ? 'replay' : 'new'}`);
  }

  async function ledgerCsv(ctx: RequestContext, viewer: Viewer, account: string) {
    const res = ctx.res;
    // Oldest first, a page at a time, waiting for the socket when it is full: the ledger may be long. A
    // member's page is read and formatted through the account's gate (signedIn does not hold it for the
    // whole download): the first may be refused (429, before anything is sent), the later ones wait.
    const read = (after: string | undefined) => {
      const page = async () => {
        // A reader gone while this page waited its turn: nothing more to read.
        if (res.destroyed) return { csv: '', n: 0, last: undefined };
        const entries = await d.accounts.ledger(account, after, CSV_BATCH);
        return { csv: entries.map(csvLine).join(''), n: entries.length, last: entries.at(-1)?.id };
      };
      return viewer.account === null ? page() : d.gate.run(account, page, { admitted: after !== undefined });
    };
    let page = await read(undefined);
    res.writeHead(200, {
      'content-type': 'text/csv; charset=utf-8',
      'content-disposition': `attachment; filename="ledger-${account.replace(/[^\w.-]/g, '_')}.csv"`,
    });
    res.write(CSV_HEADER);
    for (;;) {
      if (res.destroyed) break;
      if (page.n > 0 && !res.write(page.csv)) await writable(res);
      if (page.n < CSV_BATCH || res.destroyed) break;
      page = await read(page.last);
    }
    res.end();
  }

  async function usagePage(ctx: RequestContext, viewer: Viewer, account: string) {
    const q = query(ctx.req.url!);
    const issues = new Issues();
    const key = str(q, 'key', ['query'], issues, { maxLength: 200 }) || undefined;
    const model = str(q, 'model', ['query'], issues, { maxLength: 200 }) || undefined;
    issues.done();
    const period = lastDays(new Date(d.now()).toISOString().slice(0, 10), USAGE_DAYS);
    const sizes = await d.store.usageDayFields(account, period[0]!, period.at(-1)!);
    // The newest days whose counters fit USAGE_PAGE_MAX_FIELDS together; older ones are not read.
    let first = period.length;
    for (let total = 0; first > 0 && total + sizes[first - 1]! <= USAGE_PAGE_MAX_FIELDS;) total += sizes[--first]!;
    const days = period.slice(first);
    const [rows, keys] = await Promise.all([
      // Sliced: figures for a page, read without a reply of 1.5 MB decoded in one piece (usage-fields.ts).
      days.length === 0 ? [] : d.usage.query(account, days[0]!, days.at(-1)!, ['day', 'key', 'model'], { sliced: true }),
      d.keys.list(account),
    ]);
    await turn(); // the rows' aggregation and the page's render in turns of their own: each a few ms of 10,000 rows
    const models = [...new Set(rows.map((r) => r.model!))].sort();
    const shown = rows.filter((r) => (key === undefined || r.key_id === key) && (model === undefined || r.model === model));
    const cut = { omittedDays: first, maxFields: USAGE_PAGE_MAX_FIELDS };
    show(ctx, viewer, 'Usage', 'usage', usageBody({ account, period, days, rows: shown, keys, models, key, model, ...cut }), account);
  }

  async function sharesPage(ctx: RequestContext, viewer: Viewer, account: string) {
    // Records hold no snapshot (SPEC §13): the titles come from the snapshot objects, within SHARE_TITLE_BYTES.
    // A revoked share's snapshot was deleted at the revoke: nothing to read.
    const listed = await d.store.listShares(account, SHARES_SHOWN);
    let budget = SHARE_TITLE_BYTES;
    const unread = new Set<string>();
    for (const r of listed) {
      if (r.revoked_at !== null || r.snapshot !== undefined) continue;
      if (r.bytes <= budget) budget -= r.bytes;
      else unread.add(r.slug);
    }
    const shares = await mapLimit(listed, SHARE_TITLE_READS, async (r): Promise<ShareRecord> => {
      if (r.revoked_at !== null || r.snapshot !== undefined || unread.has(r.slug)) return r;
      const text = await d.shares.snapshotOf(r);
      return text === null ? r : { ...r, snapshot: text };
    });
    show(ctx, viewer, 'Shares', 'shares', sharesBody(account, shares, SHARES_SHOWN, { unread, titleBytes: SHARE_TITLE_BYTES }), account);
  }

  async function revokeShare(ctx: RequestContext, _viewer: Viewer, account: string) {
    const slug = ctx.params.slug!;
    if (!SLUG.test(slug)) throw new GatewayError('share_not_found', 'No share exists with this slug.');
    // The service's owner check: another account's share is the same 404 as an unknown one.
    await d.shares.revoke(slug, account);
    if (!isHtmx(ctx)) return redirect(ctx, accountPath(account, '/shares'));
    const r = await d.store.getShare(slug);
    sendHtml(ctx.res, 200, r ? shareRow(account, r) : html``);
  }

  /** One account's line in the list: balance, keys and last use (three reads, plus one per key for the list). */
  async function summary(id: string): Promise<AccountSummary> {
    const [state, keys, used] = await Promise.all([d.accounts.show(id), d.keys.list(id), d.usage.lastUsed(id)]);
    let last: string | undefined;
    for (const at of Object.values(used)) if (last === undefined || at > last) last = at;
    return {
      id,
      balance_micros: state.balance_micros,
      held_micros: state.held_micros,
      keys: keys.length,
      active_keys: keys.filter((k) => k.active).length,
      last_used: last,
    };
  }

  async function accountsPage(ctx: RequestContext, viewer: Viewer) {
    const q = query(ctx.req.url!);
    const search = typeof q.q === 'string' ? q.q.trim().slice(0, 128) : '';
    const sort = ACCOUNT_SORTS.find((s) => s === q.sort) ?? 'name';
    const dir = q.dir === 'asc' || q.dir === 'desc' ? q.dir : sort === 'name' ? 'asc' : 'desc';
    // Bounded: at most ACCOUNTS_SHOWN accounts (the first by name), read ACCOUNT_READS at a time.
    const ids = await d.store.listAccounts(search, ACCOUNTS_SHOWN);
    const rows = await mapLimit(ids, ACCOUNT_READS, summary);
    show(
      ctx,
      viewer,
      'Accounts',
      'accounts',
      accountsBody({ search, rows: sortAccounts(rows, sort, dir), limit: ACCOUNTS_SHOWN, sort, dir }),
    );
  }

  async function mintMemberLink(ctx: RequestContext, viewer: Viewer, account: string, form: URLSearchParams) {
    const issues = new Issues();
    const text = str(fields(form, ['ttl_seconds']), 'ttl_seconds', ['form'], issues, { pattern: /^\d{1,6}$/, patternText: '^\\d{1,6}$' });
    const ttl = text ? Number(text) : LINK_TTL.fallback;
    if (ttl < LINK_TTL.min || ttl > LINK_TTL.memberMax)
      issues.add(['form', 'ttl_seconds'], 'less_than_equal', `Between ${LINK_TTL.min} and ${LINK_TTL.memberMax} seconds`, text);
    issues.done();
    const link = await d.sessions.mintLink({ account }, ttl);
    show(ctx, viewer, 'Member sign-in link', 'keys', linkBody(account, link), account, 201);
  }

  async function endSessions(ctx: RequestContext, _viewer: Viewer, account: string) {
    ctx.req.resume();
    const n = await d.sessions.endAccount(account);
    const text = `${n} member session${n === 1 ? '' : 's'} of ${account} ended; member sign-in links made before now no longer work.`;
    if (isHtmx(ctx)) return sendHtml(ctx.res, 200, html`<div class="flash ok">${text}</div>`);
    redirect(ctx, accountPath(account, '/keys'));
  }

  const A = '/console/accounts/{account}';
  return [
    { method: 'GET', pattern: '/console/accounts', handler: signedIn(accountsPage, { operator: true }) },
    { method: 'GET', pattern: A, handler: signedIn(async (ctx, _v, account) => redirect(ctx, accountPath(account, '/keys'))) },
    { method: 'GET', pattern: `${A}/keys`, handler: signedIn((ctx, v, account) => keysPage(ctx, v, account)) },
    { method: 'POST', pattern: `${A}/keys`, handler: signedIn(createKey, { form: true }) },
    { method: 'GET', pattern: `${A}/keys/{id}`, handler: signedIn(keyPage) },
    { method: 'POST', pattern: `${A}/keys/{id}`, handler: signedIn(changeKey, { form: true }) },
    { method: 'GET', pattern: `${A}/credit`, handler: signedIn((ctx, v, account) => creditPage(ctx, v, account)) },
    { method: 'POST', pattern: `${A}/credit`, handler: signedIn(grant, { operator: true, form: true }) },
    { method: 'GET', pattern: `${A}/ledger.csv`, handler: signedIn(ledgerCsv, { ungated: true }) },
    { method: 'GET', pattern: `${A}/usage`, handler: signedIn(usagePage) },
    { method: 'GET', pattern: `${A}/shares`, handler: signedIn(sharesPage) },
    { method: 'POST', pattern: `${A}/shares/{slug}/revoke`, handler: signedIn(revokeShare) },
    { method: 'POST', pattern: `${A}/links`, handler: signedIn(mintMemberLink, { operator: true, form: true }) },
    { method: 'POST', pattern: `${A}/sessions/end`, handler: signedIn(endSessions, { operator: true }) },
  ];
}
