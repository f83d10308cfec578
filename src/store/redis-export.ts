/**
 * The ledger export's and usage aggregates' part of the Redis store (SPEC §10, docs/ledger-export.md):
 * the global account index, the per-account export lease and cursor (ledger-export.lua), trimming, and
 * the usage cells.
 */
import { Cluster, Redis } from 'ioredis';
import * as K from './redis-keys.ts';
import { guard } from './redis-records.ts';
import type { ExportStore, UsageCell } from './types.ts';
import { dayEndsAtSeconds, daysBetween, parseUsagePairs, USAGE_FIELDS_PER_SCAN, usageDayCells, usageField } from './usage-fields.ts';

const exportKeys = (acct: string) => [K.exportLease(acct), K.exportState(acct), K.ledger(acct)] as const;

/** The hash fields of a rebuild's cells (absolute values). */
function usageHashFields(cells: readonly UsageCell[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const c of cells) {
    out[usageField(c.key_id, c.model, 'r')] = String(c.requests);
    out[usageField(c.key_id, c.model, 'p')] = String(c.prompt_tokens);
    out[usageField(c.key_id, c.model, 'c')] = String(c.completion_tokens);
    out[usageField(c.key_id, c.model, '$')] = String(c.cost_micros);
    if (c.cached_tokens) out[usageField(c.key_id, c.model, 'k')] = String(c.cached_tokens);
  }
  return out;
}

/**
 * `ledgerExport` is the registered ledger-export.lua (lease, commit, trim, release in one script);
 * `usageFlush` usage-flush.lua (one account × day of a flush, applied at most once); `lastUsed`
 * last-used.lua (a key's last use, written only while its account holds the key).
 */
export function redisExportStore(
  redis: Redis | Cluster,
  ledgerExport: (...args: (string | number)[]) => Promise<unknown>,
  usageFlush: (...args: (string | number)[]) => Promise<unknown>,
  lastUsed: (...args: (string | number)[]) => Promise<unknown>,
): ExportStore {
  const cluster = redis instanceof Cluster;
  const s = { tgLedgerExport: ledgerExport };
  return {
    indexLedgerAccounts: (accounts) =>
      guard(accounts.length === 0 ? Promise.resolve() : redis.sadd(K.LEDGER_ACCOUNTS, ...accounts).then(() => undefined)),
    scanLedgerAccounts: (onBatch) =>
      guard(
        (async () => {
          let cursor = '0';
          do {
            const [next, members] = await redis.sscan(K.LEDGER_ACCOUNTS, cursor, 'COUNT', 500);
            cursor = next;
            if (members.length > 0) await onBatch(members);
          } while (cursor !== '0');
        })(),
      ),
    backfillLedgerIndex: () =>
      guard(
        (async () => {
          const nodes = cluster ? (redis as Cluster).nodes('master') : [redis as Redis];
          let found = 0;
          for (const node of nodes) {
            let cursor = '0';
            do {
              const [next, names] = await node.scan(cursor, 'MATCH', K.ledger('*'), 'COUNT', 1000);
              cursor = next;
              const accounts = names.map((n) => n.slice('{acct:'.length, -'}:ledger'.length));
              if (accounts.length > 0) await redis.sadd(K.LEDGER_ACCOUNTS, ...accounts);
              found += accounts.length;
            } while (cursor !== '0');
          }
          return found;
        })(),
      ),
    exportState: (acct) =>
      guard(
        redis
          .hmget(K.exportState(acct), 'cursor', 'archived_before')
          .then(([cursor, archived]) => ({ cursor: cursor || null, archived_before: archived || null })),
      ),
    acquireExportLease: (acct, token, ttlMs) =>
      guard((s.tgLedgerExport(...exportKeys(acct), 'lease', token, ttlMs) as Promise<number>).then((r) => r === 1)),
    releaseExportLease: (acct, token) =>
      guard((s.tgLedgerExport(...exportKeys(acct), 'release', token) as Promise<number>).then(() => undefined)),
    commitExport: (acct, token, from, to) =>
      guard((s.tgLedgerExport(...exportKeys(acct), 'commit', token, from ?? '', to) as Promise<number>).then((r) => r === 1)),
    trimLedger: (acct, beforeId) => guard(s.tgLedgerExport(...exportKeys(acct), 'trim', beforeId) as Promise<number>),

    flushUsage: (f) =>
      guard(
        (async () => {
          // Every command is issued in this one turn: ioredis' autopipelining sends them as one pipeline
          // per node. One script per account × day (one key: any slot layout works, NOTES §1), applied at
          // most once per flush id (usage-flush.lua); last-use (last-used.lua: only for keys still held,
          // two keys of the account's slot) and the index are idempotent writes.
          const sent: Promise<unknown>[] = [];
          const days = new Map<string, { day: string; args: (string | number)[] }>();
          for (const c of f.cells) {
            const key = K.usageDay(c.account, c.day);
            let d = days.get(key);
            if (!d) days.set(key, (d = { day: c.day, args: [] }));
            if (c.requests) d.args.push(usageField(c.key_id, c.model, 'r'), c.requests);
            if (c.prompt_tokens) d.args.push(usageField(c.key_id, c.model, 'p'), c.prompt_tokens);
            if (c.completion_tokens) d.args.push(usageField(c.key_id, c.model, 'c'), c.completion_tokens);
            if (c.cost_micros) d.args.push(usageField(c.key_id, c.model, '$'), c.cost_micros);
            if (c.cached_tokens) d.args.push(usageField(c.key_id, c.model, 'k'), c.cached_tokens);
          }
          for (const [key, d] of days) {
            sent.push(usageFlush(key, f.flushId?.process ?? '', f.flushId?.seq ?? 0, dayEndsAtSeconds(d.day, f.retentionDays), ...d.args));
          }
          for (const u of f.lastUsed) sent.push(lastUsed(K.accountKeys(u.account), K.keysUsed(u.account), u.key_id, u.at));
          if (f.ledgerAccounts.length > 0) sent.push(redis.sadd(K.LEDGER_ACCOUNTS, ...f.ledgerAccounts));
          await Promise.all(sent);
        })(),
      ),
    usageCells: (acct, from, to, o) =>
      guard(
        (async () => {
          const days = daysBetween(from, to);
          if (o?.sliced) {
            // A day at a time, a slice of it per round trip: no reply larger than ~150 KB to decode at once.
            const cells: UsageCell[] = [];
            for (const day of days) {
              const key = K.usageDay(acct, day);
              const built = usageDayCells(day);
              let cursor = '0';
              do {
                const [next, pairs] = await redis.hscan(key, cursor, 'COUNT', USAGE_FIELDS_PER_SCAN);
                built.add(pairs);
                cursor = next;
              } while (cursor !== '0');
              for (const c of built.cells()) cells.push(c);
            }
            return cells;
          }
          // 'HGETALL' spelled in capitals: ioredis turns the reply into an object only for its own
          // lower-case `hgetall`; the flat array parses without a property per field (usage-fields.ts).
          const replies = await Promise.all(days.map((d) => redis.call('HGETALL', K.usageDay(acct, d)) as Promise<string[]>));
          const cells: UsageCell[] = [];
          for (let i = 0; i < days.length; i++) for (const c of await parseUsagePairs(days[i]!, replies[i]!)) cells.push(c);
          return cells;
        })(),
      ),
    usageDayFields: (acct, from, to) => guard(Promise.all(daysBetween(from, to).map((d) => redis.hlen(K.usageDay(acct, d))))),
    replaceUsage: (acct, day, keyIds, cells, retentionDays) =>
      guard(
        (async () => {
          const key = K.usageDay(acct, day);
          const replaced = new Set(keyIds);
          const stale = Object.keys(await redis.hgetall(key)).filter((f) => replaced.has(f.slice(0, f.indexOf('|'))));
          const fields = usageHashFields(cells);
          const m = redis.multi();
          if (stale.length > 0) m.hdel(key, ...stale);
          if (Object.keys(fields).length > 0) m.hset(key, fields);
          m.expireat(key, dayEndsAtSeconds(day, retentionDays));
          await m.exec();
        })(),
      ),
    lastUsed: (acct) => guard(redis.hgetall(K.keysUsed(acct))),
  };
}
