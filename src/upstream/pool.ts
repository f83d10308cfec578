/**
 * Upstreams of each model (SPEC §1.2, §14): one undici Pool per origin with keep-alive, least-outstanding
 * balancing, and passive health — an upstream that keeps failing is ejected for a back-off period that
 * doubles while it keeps failing (capped), then tried again.
 *
 * Health that recovers (SPEC §14): every ejection starts an epoch; a failure of a request that started in
 * an earlier epoch (the burst that caused the ejection: 64 streams broken by one restart) counts for
 * nothing, so one burst is one failure toward ejection and one ejection. When every upstream a request
 * could use is ejected, the least recently ejected one gets one trial request a second (half-open): its
 * success ends the ejection, its failure re-ejects it (doubled, capped at max_eject_seconds), so a model
 * serves again within ~1 s of its upstream's recovery whatever the back-off had grown to.
 *
 * A long generation is not a hang: a non-streaming answer's headers come only once its whole generation is
 * done, so such a request timing out before its headers after it was sent is ambiguous. It counts as a
 * failure only when the upstream answered no request at all (2xx) while it waited (likely hung); one that answered
 * others meanwhile is alive, and the timeout is that request's own length (generationTimedOut()). Otherwise
 * one tenant's long non-streaming requests eject every healthy upstream of a model for every tenant.
 * Counted ones are blamed on the request's account, and so are failures of an answer (failed(): a 5xx or
 * 429 answer to a request sent, an answer broken after its headers), which a request can cause by itself
 * (vLLM answers 500 to some inputs; one tenant can saturate an upstream into 429s). An ejection that only
 * one account's failures caused stands for that account alone (SPEC §13's unit of one tenant). Another
 * account's requests still reach it, after the upstreams not ejected at all: their first answer ends the
 * ejection, their first failure turns it into an ejection for everyone. What says nothing of the request —
 * no connection, a connection refused or reset before the answer's headers, a stream's timeout before
 * them — counts for everyone (failedForEveryone()).
 */
import { Pool } from 'undici';
import type { ModelConfig } from '../config/schema.ts';

export interface Upstream {
  /** host:port — a bounded metric label, never a credential. */
  readonly label: string;
  readonly pool: Pool;
  /** Path prefix of the OpenAI API on this upstream, e.g. `/v1`. */
  readonly basePath: string;
  readonly authorization: string | undefined;
  outstanding: number;
  failures: number;
  ejections: number;
  ejectedUntil: number;
  /** Bumped by every ejection; an attempt remembers the epoch it started in. */
  epoch: number;
  /** When the current (or last) ejection started; orders "least recently ejected". */
  ejectedAt: number;
  /** When the last half-open trial was sent. */
  trialAt: number;
  /**
   * 2xx answers (their headers) so far, counted by forward.ts like `outstanding`: the proof of life
   * generationTimedOut() looks for. Not a 4xx: a model server's HTTP front refuses bad requests by itself
   * while its engine hangs.
   */
  answers: number;
  /**
   * Whom the failures since the last success are blamed on: undefined before the first, an account while
   * every one was a failure of that account's requests (failed(), generationTimedOut()), null otherwise.
   */
  blame: string | null | undefined;
  /** The account the current ejection stands for alone (its own timeouts caused it); null: everyone. */
  ejectedFor: string | null;
}

/** What the pool remembers about one request to an upstream, from its start (see start()). */
export interface Attempt {
  readonly epoch: number;
  /** The upstream's `answers` when the attempt started. */
  readonly answers: number;
  /** The request's account, whom the attempt's failed() blames; undefined: everyone. */
  readonly account: string | undefined;
}

export interface UpstreamOptions {
  connectTimeoutMs: number;
  ejectAfterFailures: number;
  ejectSeconds: number;
  /** Cap of the doubling back-off (SPEC §14: upstream.max_eject_seconds, default 60). */
  maxEjectSeconds?: number;
  /** Connections per origin; 0 = unlimited (undici's default). Every open stream holds one. */
  maxConnections: number;
}

export interface Upstreams {
  /**
   * The least-loaded healthy upstream of the model not yet tried; then the least-loaded one ejected for
   * another account only (see ejectedFor); when every one left is ejected for `account` too, the least
   * recently ejected as a half-open trial, at most one a second; else undefined. Without `account`, every
   * ejection stands.
   */
  pick(model: ModelConfig, tried: ReadonlySet<Upstream>, now: number, account?: string): Upstream | undefined;
  /** All upstreams of the model, in config order. */
  of(model: ModelConfig): readonly Upstream[];
  /** Called when a request of `account` is sent to `u`: the attempt to pass to succeeded() / failed(). */
  start(u: Upstream, now: number, account?: string): Attempt;
  /** A success of an attempt of the current epoch ends any ejection; an older one says nothing. */
  succeeded(u: Upstream, attempt?: Attempt): void;
  /**
   * The upstream failed the attempt's request after it was sent: answered 5xx or 429, or broke its answer
   * after the headers. Something the request may have caused itself, blamed on the attempt's account (an
   * ejection only one account's failures caused stands for it alone: ejectedFor). Ignored when the attempt
   * started before the current ejection (same burst); any failure after an ejection and before the next
   * success (a failed trial among them) re-ejects at once — not one of a request that started while it was
   * ejected and failed after another's answer ended it (a review's finding: that re-ejected a healthy upstream); otherwise one more toward `ejectAfterFailures`. Without
   * `attempt`: one of now, for everyone.
   */
  failed(u: Upstream, now: number, attempt?: Attempt): void;
  /**
   * As failed(), for a failure that says nothing of the request (no connection, a connection refused or
   * reset before the answer's headers, a stream's timeout before them): counted for everyone.
   */
  failedForEveryone(u: Upstream, now: number, attempt?: Attempt): void;
  /**
   * A non-streaming attempt timed out before its headers after its request was sent: the
   * upstream may just be generating a long answer. A failed() only when the upstream gave no 2xx answer to
   * any request since the attempt started (an upstream that answers nobody looks hung), blamed on the
   * attempt's account: an ejection only such failures of one account caused stands for it alone (ejectedFor).
   * Returns whether it counted.
   */
  generationTimedOut(u: Upstream, now: number, attempt: Attempt | undefined): boolean;
  close(): Promise<void>;
}

/** Half-open trials of a model whose upstreams are all ejected: one a second (SPEC §14). */
export const TRIAL_INTERVAL_MS = 1000;

export function createUpstreams(models: readonly ModelConfig[], o: UpstreamOptions): Upstreams {
  const byUrl = new Map<string, Upstream>();
  const byModel = new Map<ModelConfig, Upstream[]>();
  const pools = new Map<string, Pool>();
  for (const m of models) {
    byModel.set(
      m,
      m.upstreams.map((cfg) => {
        const key = `${cfg.url}\n${cfg.apiKey ?? ''}`;
        let u = byUrl.get(key);
        if (!u) {
          const url = new URL(cfg.url);
          let pool = pools.get(url.origin);
          if (!pool) {
            pool = new Pool(url.origin, {
              // A cap queues every stream past it behind the open ones (1,000 slow streams on 256 sockets ran at 0.34×).
              connections: o.maxConnections > 0 ? o.maxConnections : null,
              keepAliveTimeout: 30_000,
              connect: { timeout: o.connectTimeoutMs },
              // h2 only where configured explicitly; upstream model servers speak HTTP/1.1 (NOTES §3).
              allowH2: false,
            });
            pools.set(url.origin, pool);
          }
          u = {
            label: url.host,
            pool,
            basePath: url.pathname.replace(/\/+$/, ''),
            authorization: cfg.apiKey ? `Bearer ${cfg.apiKey}` : undefined,
            outstanding: 0,
            failures: 0,
            ejections: 0,
            ejectedUntil: 0,
            epoch: 0,
            ejectedAt: 0,
            trialAt: -Infinity,
            answers: 0,
            blame: undefined,
            ejectedFor: null,
          };
          byUrl.set(key, u);
        }
        return u;
      }),
    );
  }
  let rotation = 0;
  const baseMs = o.ejectSeconds * 1000;
  const maxMs = (o.maxEjectSeconds ?? 60) * 1000;

  function eject(u: Upstream, now: number): void {
    // Each re-ejection at most doubles (SPEC §14), capped; 2^30 only bounds the exponent.
    u.ejectedUntil = now + Math.min(maxMs, baseMs * 2 ** Math.min(u.ejections, 30));
    u.ejectedAt = now;
    u.ejections++;
    u.epoch++;
    u.failures = 0;
    u.ejectedFor = u.blame ?? null;
  }

  /** `blame`: the account the failure is blamed on; undefined: everyone's. */
  function count(u: Upstream, now: number, attempt: Attempt | undefined, blame: string | undefined): void {
    if (attempt && attempt.epoch !== u.epoch) return;
    // A second account, or any other kind of failure, and the streak is the upstream's, for everyone.
    u.blame = blame !== undefined && (u.blame === undefined || u.blame === blame) ? blame : null;
    // On probation (ejected before, no success since) one failure re-ejects: the back-off has passed and
    // the first request that fails says the upstream is still down, like a failed trial.
    if (u.ejections > 0 || ++u.failures >= o.ejectAfterFailures) eject(u, now);
  }

  return {
    pick(model, tried, now, account) {
      const list = byModel.get(model) ?? [];
      let best: Upstream | undefined;
      let suspect: Upstream | undefined;
      let oldest: Upstream | undefined;
      // Start at a rotating offset so ties (all idle) spread instead of always hitting the first.
      const start = rotation++ % Math.max(1, list.length);
      for (let i = 0; i < list.length; i++) {
        const u = list[(start + i) % list.length]!;
        if (tried.has(u)) continue;
        if (u.ejectedUntil > now) {
          if (u.ejectedFor === null || u.ejectedFor === account || account === undefined) {
            if (!oldest || u.ejectedAt < oldest.ejectedAt) oldest = u;
          } else if (!suspect || u.outstanding < suspect.outstanding) suspect = u;
          continue;
        }
        if (!best || u.outstanding < best.outstanding) best = u;
      }
      // Ejected for another account only (its long generations or failed requests, or its view of a hang):
      // after the clean ones, this account's requests try it without the trial limit, which is for an
      // upstream known to fail — else the other account, taking each trial, would have this one refused as
      // long as it liked. An answer ends the ejection; a failure makes it everyone's.
      if (best) return best;
      if (suspect) return suspect;
      if (!oldest) return undefined;
      // Every upstream left is ejected: the least recently ejected gets a trial, one a second. A failed
      // trial re-ejects it (now the most recently ejected), so trials rotate over the model's upstreams.
      if (now - oldest.trialAt < TRIAL_INTERVAL_MS) return undefined;
      oldest.trialAt = now;
      return oldest;
    },
    of: (model) => byModel.get(model) ?? [],
    start: (u, now, account) => ({ epoch: u.epoch, answers: u.answers, account }),
    succeeded(u, attempt) {
      if (attempt && attempt.epoch !== u.epoch) return;
      u.failures = 0;
      u.blame = undefined;
      u.ejections = 0;
      u.ejectedUntil = 0;
    },
    failed: (u, now, attempt) => count(u, now, attempt, attempt?.account),
    failedForEveryone: (u, now, attempt) => count(u, now, attempt, undefined),
    generationTimedOut(u, now, attempt) {
      // Answers from it while this one waited (any request, any tenant): alive, this answer is just long.
      if (attempt && u.answers !== attempt.answers) return false;
      count(u, now, attempt, attempt?.account);
      return true;
    },
    async close() {
      await Promise.all([...pools.values()].map((p) => p.close()));
    },
  };
}
