/**
 * The embedded store's ledger export state and usage aggregates (SPEC §10), the twin of redis-export.ts:
 * the account index, each account's export lease and cursor, trimming its ledger, and the usage cells.
 */
import type { ExportStore, LedgerEntry, UsageCell } from './types.ts';
import { daysBetween, parseUsageHash, usageField, type UsageCounter } from './usage-fields.ts';

interface ExportState {
  exportCursor: string | null;
  archivedBefore: string | null;
  lease: { token: string; until: number } | null;
  /** day → the Redis store's hash layout (usage-fields.ts), so both parse alike. */
  usage: Map<string, Record<string, string>>;
  used: Record<string, string>;
}

/** Orders two `<ms>-<seq>` ids numerically. */
function compareIds(a: string, b: string): number {
  const [am = 0, as = 0] = a.split('-').map(Number);
  const [bm = 0, bs = 0] = b.split('-').map(Number);
  return am - bm || as - bs;
}

/** `ledgers` is the store's accounts' ledgers (account id → entries, oldest first), trimmed in place. */
export function memoryExportStore(d: {
  now: () => number;
  ledgers: () => Iterable<[string, LedgerEntry[]]>;
  ledgerOf: (acct: string) => LedgerEntry[] | undefined;
  /** Whether the account still holds the key: a last use is written only then (as last-used.lua). */
  holdsKey: (acct: string, keyId: string) => boolean;
}): ExportStore & { indexAccount(acct: string): void; forgetKey(acct: string, keyId: string): void } {
  const { now } = d;
  const ledgerIndex = new Set<string>();
  const states = new Map<string, ExportState>();
  const state = (acct: string): ExportState => {
    let a = states.get(acct);
    if (!a) states.set(acct, (a = { exportCursor: null, archivedBefore: null, lease: null, usage: new Map(), used: {} }));
    return a;
  };
  return {
    indexAccount(acct) {
      ledgerIndex.add(acct);
    },
    forgetKey(acct, keyId) {
      if (states.has(acct)) delete state(acct).used[keyId];
    },
    async indexLedgerAccounts(list) {
      for (const acct of list) ledgerIndex.add(acct);
    },
    async scanLedgerAccounts(onBatch) {
      const all = [...ledgerIndex];
      for (let i = 0; i < all.length; i += 500) await onBatch(all.slice(i, i + 500));
    },
    async backfillLedgerIndex() {
      let n = 0;
      for (const [id, ledger] of d.ledgers())
        if (ledger.length > 0 || states.get(id)?.exportCursor) {
          ledgerIndex.add(id);
          n++;
        }
      return n;
    },
    async exportState(acct) {
      const a = states.get(acct);
      return { cursor: a?.exportCursor ?? null, archived_before: a?.archivedBefore ?? null };
    },
    async acquireExportLease(acct, token, ttlMs) {
      const a = state(acct);
      if (a.lease && a.lease.until > now() && a.lease.token !== token) return false;
      a.lease = { token, until: now() + ttlMs };
      return true;
    },
    async releaseExportLease(acct, token) {
      const a = states.get(acct);
      if (a?.lease?.token === token) a.lease = null;
    },
    async commitExport(acct, token, from, to) {
      const a = state(acct);
      if (!a.lease || a.lease.token !== token || a.lease.until <= now() || a.exportCursor !== from) return false;
      a.exportCursor = to;
      return true;
    },
    async trimLedger(acct, beforeId) {
      const a = states.get(acct);
      if (!a?.exportCursor) return 0;
      // Below min(before, the entry after the cursor), exactly like ledger-export.lua.
      const [cms, cseq] = a.exportCursor.split('-').map(Number) as [number, number];
      const next = `${cms}-${cseq + 1}`;
      const minId = compareIds(beforeId, next) < 0 ? beforeId : next;
      let n = 0;
      const ledger = d.ledgerOf(acct) ?? [];
      while (n < ledger.length && compareIds(ledger[n]!.id, minId) < 0) n++;
      if (n > 0) {
        ledger.splice(0, n);
        a.archivedBefore = minId;
      }
      return n;
    },

    async flushUsage(f) {
      const add = (h: Record<string, string>, field: string, n: number) => {
        if (n) h[field] = String(Number(h[field] ?? 0) + n);
      };
      // At most once per flush id and account × day, as usage-flush.lua (the mark field parses as no cell).
      const mark = f.flushId && `~flush:${f.flushId.process}`;
      const marked = new Set<Record<string, string>>();
      for (const c of f.cells) {
        const a = state(c.account);
        let h = a.usage.get(c.day);
        if (!h) a.usage.set(c.day, (h = {}));
        if (mark && !marked.has(h)) {
          if (Number(h[mark] ?? 0) >= f.flushId!.seq) continue;
          marked.add(h);
        }
        const counters: [UsageCounter, number][] = [
          ['r', c.requests],
          ['p', c.prompt_tokens],
          ['c', c.completion_tokens],
          ['$', c.cost_micros],
          ['k', c.cached_tokens],
        ];
        for (const [k, n] of counters) add(h, usageField(c.key_id, c.model, k), n);
      }
      if (mark) for (const h of marked) h[mark] = String(f.flushId!.seq);
      for (const u of f.lastUsed) if (d.holdsKey(u.account, u.key_id)) state(u.account).used[u.key_id] = u.at;
      for (const acct of f.ledgerAccounts) ledgerIndex.add(acct);
    },
    async usageCells(acct, from, to) {
      const a = states.get(acct);
      if (!a) return [];
      return daysBetween(from, to).flatMap((d) => parseUsageHash(d, a.usage.get(d) ?? {}));
    },
    async usageDayFields(acct, from, to) {
      const usage = states.get(acct)?.usage;
      return daysBetween(from, to).map((d) => Object.keys(usage?.get(d) ?? {}).length);
    },
    async replaceUsage(acct, day, keyIds, cells: readonly UsageCell[]) {
      const a = state(acct);
      const replaced = new Set(keyIds);
      const h = a.usage.get(day) ?? {};
      for (const f of Object.keys(h)) if (replaced.has(f.slice(0, f.indexOf('|')))) delete h[f];
      for (const c of cells) {
        h[usageField(c.key_id, c.model, 'r')] = String(c.requests);
        h[usageField(c.key_id, c.model, 'p')] = String(c.prompt_tokens);
        h[usageField(c.key_id, c.model, 'c')] = String(c.completion_tokens);
        h[usageField(c.key_id, c.model, '$')] = String(c.cost_micros);
        if (c.cached_tokens) h[usageField(c.key_id, c.model, 'k')] = String(c.cached_tokens);
      }
      a.usage.set(day, h);
    },
    async lastUsed(acct) {
      return { ...(states.get(acct)?.used ?? {}) };
    },
  };
}
