/**
 * Usage aggregates (SPEC §10): requests, prompt (and cached prompt) and completion tokens and cost per account × UTC day ×
 * key × model, and each key's last use (minute precision). The request path only adds to a map in
 * process (`record`, no I/O); a timer flushes the map at most every `flushIntervalMs` (≤ 1 s) in one
 * pipeline (store.flushUsage). Derived data: the ledger stays the truth and `rebuild.ts` recomputes a
 * range from it. `query` is the one read service, for the admin API, the CLI and the console.
 *
 * Equal to the ledger without a rebuild (SPEC §10): each flush carries an id (this process, a growing
 * number) and the store applies it at most once, so a flush that failed on our side after Redis applied
 * it (a restart, a timeout) is retried as it was — same id, same cells — and changes nothing the second
 * time; what arrives meanwhile waits for the next id. `requests` counts requests served: a request that
 * billed no token (no upstream answered, a refusal, a hold that never ran) is no request, in the
 * aggregates and in the rebuild alike (`servedRequests`).
 *
 * At stop (SPEC §14: Redis may be unreachable at shutdown, as for the settles) the last flush is tried until
 * the stop's deadline; what did not land then — the pending retry, a flush still in flight, the cells recorded
 * since — is written to the usage spool (`spool.ts`) with the flush ids it had or would have had, and applied
 * at the next start exactly once. Without a spool directory, or when the write fails, an error line names the
 * accounts and days lost and the `tollgate usage rebuild` commands that restore them.
 *
 * Failover (docs/ledger.md "Failover"): a flush a Redis master acknowledged may be missing from the replica
 * promoted for it. The flushes that landed in the last `resendWindowMs` are kept, and when the store reports
 * a possible loss, new flushes wait until it is known; if they may be lost, those flushes are sent again,
 * oldest first and before anything newer (a newer mark would shut an older flush out), each changing
 * nothing where it had survived.
 */
import { randomBytes } from 'node:crypto';
import { setImmediate as turn } from 'node:timers/promises';
import type { Logger } from '../obs/logger.ts';
import type { Store, UsageCell, UsageFlush } from '../store/types.ts';
import { writeUsageSpool } from './spool.ts';
import { within } from '../deadline.ts';

/** What a request's final billing reports (live keys after settle, test keys at the end, cost 0). */
export interface UsageRecord {
  account: string;
  keyId: string;
  /** Live keys write ledger entries: their account is kept in the export's index. */
  live: boolean;
  model: string;
  promptTokens: number;
  completionTokens: number;
  /** The cached part of promptTokens (SPEC §4 "Cached input"); absent = 0. */
  cachedTokens?: number;
  costMicros: number;
  /** When the request was billed (ms since epoch). */
  at: number;
}

export type UsageDimension = 'day' | 'key' | 'model';
export const USAGE_DIMENSIONS: readonly UsageDimension[] = ['day', 'key', 'model'];

/** One row of the usage read (SPEC §10): the grouped dimensions, then the sums. */
export interface UsageRow {
  day?: string;
  key_id?: string;
  model?: string;
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  cost_micros: number;
  cached_tokens: number;
}

export interface Usage {
  /** Adds one billed request to the in-process aggregate: synchronous, no I/O. */
  record(r: UsageRecord): void;
  /** Writes what was aggregated since the last flush; on failure keeps it for the next one. */
  flush(): Promise<void>;
  /** Rows for `from`..`to` (inclusive UTC days), grouped by the non-empty `groupBy`, summed over the rest. */
  /** Rows of the stored cells, grouped; `sliced` as the store's usageCells (the console's page, not the API). */
  query(account: string, from: string, to: string, groupBy: readonly UsageDimension[], o?: { sliced?: boolean }): Promise<UsageRow[]>;
  /** key id → ISO minute of its last request (flushed ones). */
  lastUsed(account: string): Promise<Record<string, string>>;
  start(): void;
  /**
   * Stops the timer and flushes once more, for at most `deadlineMs` (default: as long as the store takes);
   * what has not landed then goes to the usage spool (or, failing that, an error line naming the rebuild).
   * Resolves how many flushes were spooled. Call it after the last request could record.
   */
  stop(deadlineMs?: number): Promise<number>;
}

export interface UsageDeps {
  store: Store;
  logger: Logger;
  retentionDays: number;
  flushIntervalMs: number;
  /**
   * Distinct cells kept while the store refuses flushes; past it new cells are dropped with an error
   * line (a rebuild restores them from the ledger). Bounds memory through a long outage.
   */
  maxPendingCells?: number;
  /** Told of each flush the store refused (metrics). */
  onFlushFailed?: () => void;
  /** Where stop() writes the flushes that could not land (`server.spool_dir`); absent: an error line only. */
  spoolDir?: string;
  /** How long a landed flush is kept to be sent again after a possible loss (`store.resend_settles_ms`); 0: none. */
  resendWindowMs?: number;
}

type Cell = UsageCell & { account: string };

/**
 * 1 when a billed request counts as served — it billed tokens — else 0 (SPEC §10: a hold refused before
 * anything was sent writes no request; its zero-cost ledger entry, if any, neither).
 */
export function servedRequests(promptTokens: number, completionTokens: number): number {
  return promptTokens + completionTokens > 0 ? 1 : 0;
}

/**
 * A flush not landed after this long is dropped with an error line (the rebuild restores it): a retry
 * hours later could meet a day hash that expired with its marks, and the process's memory is bounded.
 */
const RETRY_FOR_MS = 12 * 3_600_000;

/** Resolves true once `p` settled, false when `until` (ms since epoch; undefined: never) comes first. */
function settles(p: Promise<unknown> | undefined, until: number | undefined): Promise<boolean> {
  if (until !== undefined) return within(p, until - Date.now());
  return p
    ? p.then(
        () => true,
        () => true,
      )
    : Promise.resolve(true);
}

export function createUsage(d: UsageDeps): Usage {
  const maxPending = d.maxPendingCells ?? 100_000;
  // The cells of the next flush in order, found by day, account, key and model. Those are strings a
  // request reuses (the key record's, the config's, the minute's stamp below), so a record builds no key
  // string: V8 internalizes a fresh string used as a Map key, per lookup (bench/results/instructions-vs-bare.md,
  // "The runtime calls, found and removed").
  let cells: Cell[] = [];
  let cellIndex = new Map<string, Map<string, Map<string, Map<string, Cell>>>>();
  type LastUsed = { account: string; key_id: string; at: string };
  /** By account, then key id (the same reuse); an account's map is made with its first entry. */
  let lastUsed = new Map<string, Map<string, LastUsed>>();
  let ledgerAccounts = new Set<string>();
  let dropped = 0;
  // This process's flush ids: a random name (processes of every instance share Redis) and a number.
  const processId = randomBytes(9).toString('base64url');
  let seq = 0;
  /** The flush that failed, retried as it was (same id) before anything newer goes. */
  let retry: { batch: UsageFlush; since: number } | undefined;
  /** The flush being sent (the retry or a new one), until the store answers. */
  let sending: UsageFlush | undefined;
  /** stop() began: a failure is no longer retried but spooled (its log line says so). */
  let stopping = false;
  let stopped = false;
  let lateRecords = 0;
  let timer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> | undefined;
  /** Flushes that landed in the last resendWindowMs (at most one per flush interval), oldest first. */
  const resendWindowMs = d.resendWindowMs ?? 0;
  let landed: { at: number; batch: UsageFlush }[] = [];
  /** A loss the store reported and has not resolved yet: no flush goes until it has. */
  let lossPending: Promise<boolean> | undefined;
  /** Flushes to send again (a loss resolved as real), oldest first, before the retry and anything new. */
  let resends: UsageFlush[] = [];
  const remember = (batch: UsageFlush) => {
    if (resendWindowMs <= 0 || !d.store.onPossibleLoss) return;
    const now = Date.now();
    landed = landed.filter((l) => l.at >= now - resendWindowMs);
    landed.push({ at: now, batch });
  };
  if (resendWindowMs > 0)
    d.store.onPossibleLoss?.((lost) => {
      const from = Date.now() - resendWindowMs;
      const taken = landed.filter((l) => l.at >= from).map((l) => l.batch);
      landed = [];
      // Nothing landed in the window: nothing to send again, nothing for new flushes to wait for.
      if (taken.length === 0) return;
      const pending = (lossPending = lost.then(
        (l) => {
          if (l) {
            resends = [...resends, ...taken].sort((a, b) => a.flushId!.seq - b.flushId!.seq);
            d.logger.warn({ flushes: taken.length }, 'usage flushes that landed just before a possible loss are sent again');
          }
          return l;
        },
        () => true,
      ));
      void pending.finally(() => {
        if (lossPending === pending) lossPending = undefined;
      });
    });
  // The UTC day and minute of the last record, reused within that minute: formatting a date per
  // request was most of record()'s cost (bench/micro/usage-record.bench.ts, bench/results/micro.md).
  let minuteStart = -1;
  let stamp = { day: '', minute: '' };
  const clock = (at: number) => {
    if (at < minuteStart || at >= minuteStart + 60_000) {
      minuteStart = at - (at % 60_000);
      const iso = new Date(minuteStart).toISOString();
      stamp = { day: iso.slice(0, 10), minute: `${iso.slice(0, 16)}:00Z` };
    }
    return stamp;
  };

  /** The map at `key` in `m`, made when missing. */
  function level<V>(m: Map<string, Map<string, V>>, key: string): Map<string, V> {
    let next = m.get(key);
    if (next === undefined) m.set(key, (next = new Map()));
    return next;
  }

  function add(c: Cell): void {
    const have = cellIndex.get(c.day)?.get(c.account)?.get(c.key_id)?.get(c.model);
    if (have) {
      have.requests += c.requests;
      have.prompt_tokens += c.prompt_tokens;
      have.completion_tokens += c.completion_tokens;
      have.cost_micros += c.cost_micros;
      have.cached_tokens += c.cached_tokens;
    } else if (cells.length < maxPending) {
      const cell = { ...c };
      level(level(level(cellIndex, c.day), c.account), c.key_id).set(c.model, cell);
      cells.push(cell);
    } else {
      dropped++;
    }
  }

  async function flushNow(): Promise<void> {
    // A reported loss not known yet: a flush landing now could carry a mark that shuts out the resends.
    if (lossPending) return;
    while (resends.length > 0) {
      const again = resends[0]!;
      try {
        sending = again;
        await d.store.flushUsage(again);
        resends.shift();
        remember(again);
      } catch (err) {
        d.onFlushFailed?.();
        d.logger.warn({ err: (err as Error).message, cells: again.cells.length }, 'usage flush sent again after a loss failed; retried');
        return;
      } finally {
        sending = undefined;
      }
    }
    const pending = retry;
    if (pending) {
      try {
        sending = pending.batch;
        await d.store.flushUsage(pending.batch);
        retry = undefined;
        remember(pending.batch);
      } catch (err) {
        d.onFlushFailed?.();
        if (Date.now() - pending.since > RETRY_FOR_MS) {
          d.logger.error(
            { err: (err as Error).message, cells: pending.batch.cells.length },
            'usage flush dropped after retrying for 12 hours: run `tollgate usage rebuild` for the days affected',
          );
          retry = undefined;
        } else {
          d.logger.warn(
            { err: (err as Error).message, cells: pending.batch.cells.length },
            stopping ? 'usage flush failed again at stop (see the next line)' : 'usage flush failed again; retried as it was',
          );
        }
        return;
      } finally {
        sending = undefined;
      }
    }
    if (cells.length === 0 && lastUsed.size === 0 && ledgerAccounts.size === 0) return;
    const batch = take();
    try {
      sending = batch;
      await d.store.flushUsage(batch);
      remember(batch);
    } catch (err) {
      // Redis may have applied it before the failure reached us: retried whole, with its id (at most once).
      retry = { batch, since: Date.now() };
      d.onFlushFailed?.();
      d.logger.warn(
        { err: (err as Error).message, cells: batch.cells.length },
        stopping ? 'usage flush failed at stop (see the next line)' : 'usage flush failed; retried as it was',
      );
    } finally {
      sending = undefined;
    }
    if (dropped > 0) {
      d.logger.error(
        { dropped },
        'usage aggregates dropped while the store refused flushes: run `tollgate usage rebuild` for the days affected',
      );
      dropped = 0;
    }
  }

  /** What was recorded since the last flush, as the next flush (the next id), emptying the in-process map. */
  function take(): UsageFlush {
    const batch: UsageFlush = {
      cells,
      lastUsed: [...lastUsed.values()].flatMap((byKey) => [...byKey.values()]),
      ledgerAccounts: [...ledgerAccounts],
      retentionDays: d.retentionDays,
      flushId: { process: processId, seq: ++seq },
    };
    cells = [];
    cellIndex = new Map();
    lastUsed = new Map();
    ledgerAccounts = new Set();
    return batch;
  }

  /** `tollgate usage rebuild` commands for the accounts and days of `flushes`, one per account. */
  function rebuildCommands(flushes: readonly UsageFlush[]): string[] {
    const byAccount = new Map<string, string[]>();
    for (const f of flushes)
      for (const c of f.cells) (byAccount.get(c.account) ?? byAccount.set(c.account, []).get(c.account)!).push(c.day);
    return [...byAccount].map(([account, ds]) => {
      ds.sort();
      return `tollgate usage rebuild --account ${account} --from ${ds[0]} --to ${ds.at(-1)}`;
    });
  }

  /**
   * At stop: every flush that has not landed, in flush order — the retry, the one in flight (it may land
   * yet: its spooled copy then changes nothing), then what was recorded since, as the next flush.
   */
  function unlanded(): UsageFlush[] {
    // Flushes taken at a loss not known by now are not: they landed, and whether they were lost is never
    // learnt (as for the settles, credit.ts; docs/ledger.md "Failover").
    const owed = new Set<UsageFlush>(resends);
    resends = [];
    if (retry) owed.add(retry.batch);
    if (sending) owed.add(sending);
    if (cells.length > 0 || lastUsed.size > 0 || ledgerAccounts.size > 0) owed.add(take());
    retry = undefined;
    return [...owed].sort((a, b) => a.flushId!.seq - b.flushId!.seq);
  }

  async function spoolAtStop(): Promise<number> {
    const owed = unlanded();
    if (owed.length === 0) return 0;
    const lost = {
      flushes: owed.length,
      cells: owed.reduce((n, f) => n + f.cells.length, 0),
      accounts: [...new Set(owed.flatMap((f) => f.cells.map((c) => `${c.account} ${c.day}`)))].sort(),
    };
    if (d.spoolDir !== undefined) {
      try {
        const file = await writeUsageSpool(d.spoolDir, owed);
        d.logger.error(
          { ...lost, spool: file },
          'usage flushes spooled at stop (store unreachable): applied once at the next start or by `tollgate spool replay`; if this volume is lost, rebuild the accounts and days named here',
        );
        return owed.length;
      } catch (e) {
        d.logger.error({ err: (e as Error).message, spool: d.spoolDir }, 'usage spool write failed');
      }
    }
    d.logger.error(
      { ...lost, rebuild: rebuildCommands(owed) },
      'usage aggregates lost at stop (store unreachable, not spooled): run the `tollgate usage rebuild` commands named here once the settles landed',
    );
    return 0;
  }

  function flush(): Promise<void> {
    // Stopped: what was left is in the spool (or the error line); nothing more is sent from here.
    if (stopped) return Promise.resolve();
    // One flush at a time: a slow store never gets a second pipeline stacked on the first.
    flushing ??= flushNow().finally(() => (flushing = undefined));
    return flushing;
  }

  return {
    record(r) {
      if (stopped) {
        // The gateway stops usage after the last settle could record: a record after it is a bug, said loudly.
        if (lateRecords++ === 0)
          d.logger.error(
            { account: r.account, day: new Date(r.at).toISOString().slice(0, 10) },
            'usage recorded after stop: not in the aggregates; run `tollgate usage rebuild` for its account and day',
          );
        return;
      }
      const { day, minute } = clock(r.at);
      add({
        account: r.account,
        day,
        key_id: r.keyId,
        model: r.model,
        requests: servedRequests(r.promptTokens, r.completionTokens),
        prompt_tokens: r.promptTokens,
        completion_tokens: r.completionTokens,
        cost_micros: r.costMicros,
        cached_tokens: r.cachedTokens ?? 0,
      });
      const seen = lastUsed.get(r.account)?.get(r.keyId);
      if (seen) seen.at = minute;
      else level(lastUsed, r.account).set(r.keyId, { account: r.account, key_id: r.keyId, at: minute });
      if (r.live) ledgerAccounts.add(r.account);
    },
    flush,
    async query(account, from, to, groupBy, o) {
      const [byDay, byKey, byModel] = [groupBy.includes('day'), groupBy.includes('key'), groupBy.includes('model')];
      // Each row once, under its sort key: a day's thousands of cells cost one lookup each, and the sort
      // compares strings made once, not two made per comparison.
      const rows = new Map<string, UsageRow>();
      const cells = await d.store.usageCells(account, from, to, o);
      if (o?.sliced) await turn(); // the last slice's parse and this aggregation in turns of their own
      for (const c of cells) {
        const id = `${byDay ? c.day : ''}\n${byKey ? c.key_id : ''}\n${byModel ? c.model : ''}`;
        let have = rows.get(id);
        if (!have) {
          // SPEC §10's field order: the grouped dimensions, then the sums.
          have = {
            ...(byDay && { day: c.day }),
            ...(byKey && { key_id: c.key_id }),
            ...(byModel && { model: c.model }),
            requests: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_micros: 0,
            cached_tokens: 0,
          };
          rows.set(id, have);
        }
        have.requests += c.requests;
        have.prompt_tokens += c.prompt_tokens;
        have.completion_tokens += c.completion_tokens;
        have.cost_micros += c.cost_micros;
        have.cached_tokens += c.cached_tokens;
      }
      return [...rows.keys()].sort().map((id) => rows.get(id)!);
    },
    lastUsed: (account) => d.store.lastUsed(account),
    start() {
      timer ??= setInterval(() => void flush(), d.flushIntervalMs);
      timer.unref();
    },
    async stop(deadlineMs) {
      clearInterval(timer);
      timer = undefined;
      if (stopped) return 0;
      stopping = true;
      const until = deadlineMs === undefined ? undefined : Date.now() + deadlineMs;
      // The flush under way, then one more for what came since (the retry first: a newer flush never lands
      // before an older one, which its mark would then shut out).
      if (await settles(flushing, until)) await settles(flush(), until);
      stopped = true;
      return spoolAtStop();
    },
  };
}
