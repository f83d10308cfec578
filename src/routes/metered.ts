/**
 * The metered pipeline every model endpoint shares (SPEC §1.2, §2a, §4). The gate (http/gate.ts) has
 * authenticated the key, checked the endpoint's scope and taken its concurrency slot; from there:
 * read + validate (endpoint) → model and the endpoints it serves → rate limit with the token estimate →
 * credit hold → forward (pick upstream, retry before the first byte) → relay + meter (formats.ts) →
 * settle (in a `finally` no abort can skip) → `recordFinalBilling`. What differs per endpoint is a
 * MeteredEndpoint declaration (routes/chat-completions.ts, responses.ts, completions.ts, embeddings.ts).
 */
import type { ServerResponse } from 'node:http';
import { GatewayError } from '../http/errors.ts';
import { readJson } from '../http/body.ts';
import type { Route } from '../http/router.ts';
import type { RequestContext } from '../http/context.ts';
import { requireModel, requireScope, type Authenticator } from '../auth/authenticate.ts';
import type { Config, Endpoint, ModelConfig } from '../config/schema.ts';
import type { ProcessBodyBudget } from '../limits/body-budget.ts';
import type { Concurrency } from '../limits/concurrency.ts';
import { holdNotRun, holdTtlMs as holdTtlOf, type Credit } from '../credit/credit.ts';
import { costMicros, holdMicros } from '../credit/pricing.ts';
import { budgetCharge } from '../credit/budget.ts';
import { createHeaderPolicy } from '../upstream/headers.ts';
import { ClientGoneError, forward, upstreamFailure, type Answered } from '../upstream/forward.ts';
import { classify, type UpstreamCall } from '../upstream/call.ts';
import type { Upstreams } from '../upstream/pool.ts';
import { maxEventBytes, maxPassedEventBytes, relayJson, relaySse, shuttingDown, type RelayOutcome } from '../meter/relay.ts';
import type { Tokenizer } from '../meter/tokenizer.ts';
import type { MeteredEndpoint, OutputBound, StatefulRequest } from './endpoint.ts';
import { bill, NOTHING_PRODUCED, type Billed } from '../meter/bill.ts';
import { bound, type Metrics } from '../obs/metrics.ts';
import { isoTime } from '../obs/iso-time.ts';
import type { KeyEnv, UsageSource } from '../store/types.ts';
import type { Usage } from '../usage/usage.ts';
import { isApiError, readSmallBody, routeNotFound } from '../upstream/not-found.ts';
import { withTraceparent, type RequestTrace, type Tracing } from '../obs/tracing.ts';

export interface MeteredDeps {
  config: Config;
  /** Request body bytes held across the process and per key (limits.max_inflight_body_bytes[_per_key]). */
  bodyBudget: ProcessBodyBudget;
  /** The gate's slots (limits.max_concurrent_per_key / _per_account): an attempt abandoned while queued keeps one. */
  concurrency?: Pick<Concurrency, 'hold'>;
  credit: Credit;
  upstreams: Upstreams;
  tokenizer: Tokenizer;
  metrics: Metrics;
  now: () => number;
  /** Usage aggregates (SPEC §10): one in-process record per billed request. */
  usage?: Usage;
  /** Aborted at the drain deadline: a stream still open ends with the `shutting_down` event (SPEC §14). */
  shutdown?: AbortSignal;
  /**
   * Aborted a moment after the drain deadline: a stateful request's usage lookup still running then is given
   * up for the estimate, so that its settle is handed over while the spool can still take it (SPEC §14).
   */
  billingCut?: AbortSignal;
  /** SPEC §15 traces (obs/tracing.ts); undefined when `otel` is off: every hook below is then a no-op. */
  tracing?: Tracing | undefined;
  /** The gate's authenticator: the key is looked at again once the body is in (prepare). */
  auth: Pick<Authenticator, 'authenticate' | 'current'>;
}

/**
 * How long a JSON body's read goes on after its client left (SPEC §2a: the upstream is aborted within
 * 100 ms of a client abort). Over loopback or a LAN the rest of an answer already generated arrives in a
 * few ms, with its usage; what has not arrived by then is billed from what did (relay.ts `cut`).
 */
export const JSON_TAIL_GRACE_MS = 50;

/** `text/event-stream` in a Content-Type, in any case. */
const EVENT_STREAM = /text\/event-stream/i;

/** A request's final billing, known once it has settled (or, for a test key, once it was counted). */
export interface FinalBilling {
  requestId: string;
  endpoint: Endpoint;
  account: string;
  keyId: string;
  env: KeyEnv;
  model: string;
  promptTokens: number;
  completionTokens: number;
  costMicros: number;
  source: UsageSource;
  /** The cached part of promptTokens (SPEC §4 "Cached input"). */
  cachedTokens: number;
}

/** What a request carries past its body (see prepare). */
interface Prepared {
  model: ModelConfig;
  output: OutputBound;
  promptEstimate: number;
  payload: Buffer;
  reply: { model: string; stream: boolean; wantsUsage: boolean; severalChoices?: boolean; echo?: boolean };
  /** Set for a stateful request (SPEC §4): the hold's input part and where its usage is asked for. */
  stateful: StatefulRequest | undefined;
}

/** The request body's budget release, once the body was read (called when the pipeline ends). */
interface HeldBody {
  release: (() => void) | undefined;
  /**
   * Set when an attempt was aborted while queued for a connection (call.ts `unqueued`): the pool still holds
   * the upstream payload, so the body's bytes are given back only once it lets go, however soon the request
   * itself ended and settled. Without it, a key's abandoned requests queued behind busy connections held
   * memory no budget counted. The key's and account's concurrency slot is held as long (pipeline's finally).
   */
  until?: Promise<unknown> | undefined;
}

/** The route of one metered endpoint. */
export function meteredRoute<B extends { model: string }>(d: MeteredDeps, ep: MeteredEndpoint<B>): Route {
  const models = new Map(d.config.models.map((m) => [m.name, m]));
  const up = d.config.upstream;
  const holdTtlMs = holdTtlOf(d.config);
  // Metric children bound once (labels: model / model, kind, source).
  const ttfb = bound(d.metrics.upstreamTtfb);
  const tokens = bound(d.metrics.tokens);
  const debited = bound(d.metrics.creditDebited);
  const overruns = bound(d.metrics.upstreamOverruns);
  const headerPolicy = createHeaderPolicy({ forward: up.forwardHeaders, return: up.returnHeaders });

  /**
   * The one place where a request's final billing is known, after its settle was issued: the log line,
   * the token and credit metrics. Anything else that wants per-request billing hooks in here.
   */
  function recordFinalBilling(ctx: RequestContext, f: FinalBilling, maxOutput: number, at: number): void {
    // Field by field (an object literal with a spread before other fields is built in V8's runtime).
    const log = ctx.log;
    log.prompt_tokens = f.promptTokens;
    log.completion_tokens = f.completionTokens;
    if (f.cachedTokens > 0) log.cached_tokens = f.cachedTokens;
    log.usage_source = f.source;
    log.cost_micros = f.costMicros;
    if (f.completionTokens > maxOutput) {
      // An upstream that ignored its output cap: debited in full (SPEC §4's only overspend), counted, logged.
      overruns(f.model).inc();
      ctx.log.overrun_tokens = f.completionTokens - maxOutput;
    }
    if (f.promptTokens > 0) tokens(f.model, 'prompt', f.source).inc(f.promptTokens);
    if (f.completionTokens > 0) tokens(f.model, 'completion', f.source).inc(f.completionTokens);
    if (f.env === 'live' && f.costMicros > 0) debited(f.model).inc(f.costMicros);
    // Usage aggregates (SPEC §10): summed in process, flushed at most every second; no Redis round trip here.
    d.usage?.record({
      account: f.account,
      keyId: f.keyId,
      live: f.env === 'live',
      model: f.model,
      promptTokens: f.promptTokens,
      completionTokens: f.completionTokens,
      cachedTokens: f.cachedTokens,
      costMicros: f.env === 'live' ? f.costMicros : 0,
      at,
    });
  }

  async function handle(ctx: RequestContext): Promise<void> {
    // Watch for the client leaving from the very start: a client gone during the hold's round trip must
    // still abort everything after it (otherwise the upstream runs until total_timeout_ms).
    const aborter = new AbortController();
    const onClose = () => {
      if (!ctx.res.writableFinished) aborter.abort();
    };
    // Gone while the gate authenticated: its 'close' has been emitted already.
    if (ctx.res.destroyed && !ctx.res.writableFinished) aborter.abort();
    ctx.res.once('close', onClose);
    const trace = d.tracing?.start(ctx, ep.endpoint);
    const body: HeldBody = { release: undefined };
    try {
      await pipeline(ctx, aborter.signal, trace, body);
    } catch (err) {
      trace?.fail(err);
      throw err;
    } finally {
      // The pipeline is over (upstream done, billing read the payload): the body's bytes are given back now,
      // not when the response closes, so a response still waiting on its client (an error body included)
      // holds no body budget.
      if (body.until) {
        const release = body.release;
        void body.until.then(() => release?.());
      } else body.release?.();
      ctx.res.off('close', onClose);
      trace?.end(ctx.res.statusCode);
    }
  }

  async function pipeline(ctx: RequestContext, signal: AbortSignal, trace: RequestTrace | undefined, held: HeldBody): Promise<void> {
    // The upstream attempt in flight; the client leaving aborts it, whenever that happens.
    let current: UpstreamCall | undefined;
    // Set once a JSON body is relayed: its generation is over, so the client leaving lets the read go on
    // for JSON_TAIL_GRACE_MS (meter/relay.ts), to bill the trailing usage, before it stops the upstream.
    const relaying = { readOnGone: false };
    signal.addEventListener(
      'abort',
      () => {
        if (!relaying.readOnGone) return current?.abort(new ClientGoneError());
        setTimeout(() => current?.abort(new ClientGoneError()), JSON_TAIL_GRACE_MS).unref();
      },
      { once: true },
    );
    // Every attempt made: one aborted while queued keeps the body reserved until the pool lets go of it.
    const attempts: UpstreamCall[] = [];
    const track = (c: UpstreamCall | undefined) => {
      current = c;
      if (c && attempts.at(-1) !== c) attempts.push(c);
      if (c && signal.aborted) c.abort(new ClientGoneError());
    };
    const { model, output, promptEstimate, payload, reply, stateful } = await prepare(ctx, held);
    const key = ctx.key!;
    ctx.log.model = model.name;
    trace?.model(model.name, model.upstreamModel);
    const admission = await ctx.admit!(promptEstimate + output.total);
    const live = key.env === 'live';
    // The settle names its hold's expiry: that is where the store finds the hold (docs/ledger.md).
    const admitted = d.now();
    const holdExpiresAtMs = Math.ceil(admitted + holdTtlMs);
    // …and the bucket it is taken in, by this process's bucket size: a settle applied elsewhere (the spool,
    // after a config change) looks there, not in a bucket of its own size.
    const holdBucketDue = live ? d.credit.holdBucketDue(holdExpiresAtMs) : undefined;
    // A key with a budget (SPEC §15): its period counter is charged by the hold and the settle; none otherwise.
    const budget = live && key.budget ? budgetCharge(key.id, key.budget, admitted) : undefined;
    const hold = live ? holdMicros(model.price, stateful?.heldPrompt ?? promptEstimate, output.total) : 0;
    /** The request's one settle (SPEC §4): not awaited by the response, tracked for shutdown, retried until it lands. */
    const settle = (b: Billed, costMicros: number, at = d.now()) => {
      const settling = d.credit.settle({
        account: key.account,
        requestId: ctx.requestId,
        costMicros,
        keyId: key.id,
        model: model.name,
        promptTokens: b.promptTokens,
        completionTokens: b.completionTokens,
        usageSource: b.source,
        ts: isoTime(at),
        holdExpiresAtMs,
        holdBucketDue,
        holdMicros: hold,
        // The optional fields last: a field after a spread is defined in V8's runtime, per request.
        ...(b.cachedTokens > 0 && { cachedTokens: b.cachedTokens }),
        ...(budget && { budget }),
      });
      trace?.settle(settling, costMicros);
    };
    if (live) {
      const holdSpan = trace?.hold(hold);
      try {
        await d.credit.hold(key.account, ctx.requestId, hold, holdExpiresAtMs, budget);
        holdSpan?.end();
      } catch (err) {
        holdSpan?.end(err);
        // The hold may have run in Redis after our command timed out: settle at 0 in the background (it lands
        // behind the hold, is idempotent, and stops a late hold), so the credit is not locked until the reaper.
        // A hold never sent (the pipe was disconnected) cannot have run: no settle (SPEC §14), or an outage
        // under load would leave a retrying settle in memory and a zero-cost entry per refused request.
        if ((err as GatewayError).code === 'store_unavailable' && !holdNotRun(err)) {
          settle(NOTHING_PRODUCED, 0);
        }
        throw err;
      }
      ctx.log.hold_micros = hold;
    }
    // Shutdown waits for this request's settle even while billing still awaits the tokenizer.
    const settleStarted = live ? d.credit.expect({ account: key.account, requestId: ctx.requestId, holdMicros: hold }) : undefined;

    // From here on, whatever happens, the request is settled exactly once.
    const gone = () => !ctx.res.writableFinished && ctx.res.destroyed;
    const deadline = d.now() + up.totalTimeoutMs;
    // Past the total deadline the current attempt is cut; forward() tries no other upstream after it.
    let totalCut = false;
    const total = setTimeout(() => {
      totalCut = true;
      current?.abort(Object.assign(new Error('total upstream timeout'), { code: 'UND_ERR_HEADERS_TIMEOUT' }));
    }, up.totalTimeoutMs);
    const t0 = process.hrtime.bigint();
    let answered: Answered | undefined;
    let outcome: RelayOutcome | undefined;
    let sentThenGone = false;
    // An attempt of a non-streaming request timed out before its headers after it was sent (forward.ts): an
    // upstream may have generated its answer. A stream's headers come before its first token: not set for one.
    let generatedUnseen = false;
    trace?.upstreamStart();
    try {
      answered = await forward(
        d,
        model,
        {
          path: ep.upstreamPath,
          body: payload,
          headersTimeoutMs: up.headersTimeoutMs,
          idleTimeoutMs: up.idleTimeoutMs,
          deadline,
          stream: reply.stream,
          account: key.account,
          onSentTimeout: reply.stream ? undefined : () => void (generatedUnseen = true),
          headers: (auth) => withTraceparent(trace, headerPolicy.upstreamRequest(ctx.req.headers, ctx.requestId, auth, payload.length)),
        },
        signal,
        track,
      );
      if (signal.aborted) throw new ClientGoneError();
      if (stateful?.retrievePath) answered.call.keepHead(); // the answer's id, should its usage have to be asked for
      ctx.log.upstream = answered.call.upstream.label;
      ctx.log.upstream_status = answered.status;
      trace?.upstreamAnswered(answered.status, answered.call.upstream.label);
      ttfb(model.name).observe(Number(answered.waitedNs) / 1e9);
      outcome = await respond(ctx, answered, reply, payload.length, relaying);
      // The text of an echo answer starts with the prompt: without usage it is no count of the completion.
      if (outcome && reply.echo === true && !outcome.usage) outcome = { ...outcome, uncounted: true };
      if (outcome?.end === 'upstream_failed') {
        if (outcome.cutByGateway || totalCut) {
          // Cut by the gateway (an event past its bound, its total timeout) while the upstream was answering:
          // not the upstream's failure, or one tenant's long or large answers would eject it for every tenant.
          ctx.log.relay_cut = outcome.cutByGateway ? 'event_too_large' : 'total_timeout';
        } else {
          // A stream that broke after its first byte counts toward ejecting its upstream too (once per burst).
          d.metrics.upstreamErrors.inc({ upstream: answered.call.upstream.label, reason: 'stream_broken' });
          d.upstreams.failed(answered.call.upstream, d.now(), answered.call.attempt);
        }
      }
      // A JSON answer that failed before its first byte was written: the client gets SPEC §2a's error, not a
      // reset (not retried: the upstream answered, and generated). Billed below from what arrived.
      if (outcome?.unsent) {
        throw upstreamFailure(model.name, classify(outcome.unsent).kind === 'timeout');
      }
    } catch (err) {
      if (!(err instanceof ClientGoneError)) throw err;
      // Gone once the request was sent and before its answer was relayed (an upstream's refusal aside).
      sentThenGone = outcome === undefined && attempts.some((c) => c.sent) && (answered === undefined || answered.status < 300);
    } finally {
      clearTimeout(total);
      const queued = attempts.filter((c) => c.unqueued !== undefined);
      if (queued.length > 0) {
        held.until = Promise.all(queued.map((c) => c.unqueued));
        // The request's slot was given back when its client left ('close', a few microtasks ago, no I/O in
        // between): taken again until the pool lets go, so a key has at most max_concurrent_per_key requests in
        // flight and abandoned in the queue together (test/e2e/queued-abort-connections.test.ts: 8 of 8 more
        // refused, where before each batch it abandoned freed its slots for the next, unbounded).
        d.concurrency?.hold(key.id, key.account, held.until);
      }
      trace?.upstreamEnd(answered?.status, outcome?.end);
      const t1 = process.hrtime.bigint();
      const ok = answered !== undefined && answered.status >= 200 && answered.status < 300;
      const b = await bill(
        d.tokenizer,
        (budget) => ep.countPrompt(payload, d.tokenizer, budget),
        promptEstimate,
        ok,
        outcome,
        output.total,
        stateful && {
          request: stateful,
          call: answered?.call,
          format: ep.format,
          timeoutMs: up.headersTimeoutMs,
          cut: d.billingCut,
          sentThenGone,
        },
        generatedUnseen,
      );
      const cost = costMicros(model.price, b.promptTokens, b.completionTokens, b.cachedTokens);
      const billedAt = d.now(); // the settle's ts and the usage record's time: one clock read
      admission.settle(b.promptTokens + b.completionTokens);
      ctx.log.relay_end = outcome?.end ?? (gone() ? 'client_gone' : 'none');
      if (live) {
        settle(b, cost, billedAt);
        settleStarted?.(); // the settle itself is tracked from here on
      }
      recordFinalBilling(
        ctx,
        {
          requestId: ctx.requestId,
          endpoint: ep.endpoint,
          account: key.account,
          keyId: key.id,
          env: key.env,
          model: model.name,
          promptTokens: b.promptTokens,
          completionTokens: b.completionTokens,
          costMicros: cost,
          source: b.source,
          cachedTokens: b.cachedTokens,
        },
        output.total,
        billedAt,
      );
      trace?.billed(b.promptTokens, b.completionTokens, cost, b.source, b.cachedTokens);
      // Arrival → upstream call, plus chunk handling, plus settling; upstream waiting excluded.
      ctx.overheadNs = t0 - ctx.start + (outcome?.chunkNs ?? 0n) + (process.hrtime.bigint() - t1);
    }
  }

  /**
   * Reads and validates the body and turns it into what the rest of the request needs: the model, the
   * output bound, the prompt's hold estimate, the upstream payload and the few facts the response needs.
   * The parsed body (its text and objects, 2–3× its bytes) dies with this call (SPEC §12); billing
   * re-reads the prompt from the payload in the rare case it must count it. A failure here is admitted
   * by the gate (without tokens) before it reaches the client.
   */
  async function prepare(ctx: RequestContext, held: HeldBody): Promise<Prepared> {
    // The gate has taken the key's slot and request admission already (SPEC §13): only now is the body read.
    const read = await readJson(ctx.req, d.config.limits.maxBodyBytes, d.bodyBudget.forKey(ctx.key!.id), d.config.limits.maxJsonDepth);
    // The body's bytes stay reserved until the pipeline ends (handle's finally): its upstream payload lives that long.
    held.release = read.release;
    // The key again, now that the body is in (up to server.body_timeout_ms after the gate): one disabled,
    // expired, rolled over or deleted meanwhile is refused here, before anything is held or sent (SPEC
    // §1.1, §15). Unchanged, that is a cache lookup; changed, the record as it is now, its scope checked again.
    if (!d.auth.current(ctx.key!)) {
      ctx.key = await d.auth.authenticate(ctx.req);
      requireScope(ctx.key, ep.scope);
    }
    const body = ep.validate(read.value, d.config.limits);
    const model = models.get(body.model);
    if (!model) throw new GatewayError('model_not_found', `The model '${body.model}' does not exist.`, { param: 'model' });
    if (!model.endpoints.includes(ep.endpoint)) {
      throw new GatewayError('model_not_found', `The model '${body.model}' does not serve ${ep.pattern}.`, { param: 'model' });
    }
    requireModel(ctx.key!, model.name);
    const output = ep.output(body, model);
    const promptEstimate = ep.estimatePrompt(body, read.bytes);
    return {
      model,
      output,
      promptEstimate,
      payload: ep.payload(body, model, output.perChoice),
      reply: { model: body.model, ...ep.reply(body) },
      stateful: ep.stateful?.(body, model, promptEstimate),
    };
  }

  /**
   * Writes the response for an answered upstream call; returns what the relay metered. `requestBytes`
   * (the upstream payload's) bounds a stream's largest event; `relaying.readOnGone` is set for a JSON body.
   */
  async function respond(
    ctx: RequestContext,
    a: Answered,
    body: Prepared['reply'],
    requestBytes: number,
    relaying: { readOnGone: boolean },
  ): Promise<RelayOutcome | undefined> {
    const res: ServerResponse = ctx.res;
    const headers = headerPolicy.clientResponse(a.headers);
    // Set here, not by the edge (server.ts): one writeHead with every header is Node's fast path.
    headers['x-request-id'] = ctx.requestId;
    if (ctx.extraHeaders) Object.assign(headers, ctx.extraHeaders);
    if (a.status >= 500) {
      // A 500/501 is not retried (only 502/503/504/429 are) and its body may identify the upstream: 502.
      a.call.abort(new Error('upstream 5xx not relayed'));
      throw new GatewayError('upstream_error', `The upstream of model '${body.model}' failed.`);
    }
    if (a.status === 404) {
      // An API error passes through; a 404 of the upstream's router is a 502 naming the route (not-found.ts).
      const raw = await readSmallBody(a.call);
      const route = a.call.upstream.basePath + ep.upstreamPath;
      if (!raw || !isApiError(raw)) throw routeNotFound(body.model, route);
      headers['content-length'] = String(raw.length);
      res.writeHead(404, headers);
      res.end(raw);
      return undefined;
    }
    // The relay follows what the upstream sent, not what was asked: an upstream that ignores `stream`
    // must still be metered from its own format.
    // Media types are case-insensitive (RFC 9110 §8.3.1): a test of the header as it is, no lower-cased copy.
    const ct = a.headers['content-type'];
    const stream = a.status < 300 && (typeof ct === 'string' ? EVENT_STREAM.test(ct) : body.stream);
    if (a.call.coding) ctx.log.upstream_encoding = a.call.coding;
    if (!stream) {
      // A decoded answer (upstream/content-coding.ts) is as long as it decodes to: no length up front.
      if (a.headers['content-length'] !== undefined && !a.call.coding) headers['content-length'] = a.headers['content-length'];
      // The head goes out with the body's first byte: an upstream failing before it gets SPEC's error instead.
      relaying.readOnGone = true;
      return relayJson(
        a.call,
        res,
        () => res.destroyed && !res.writableFinished,
        ep.format,
        () => res.writeHead(a.status, headers),
      );
    }
    res.writeHead(a.status, headers);
    // Headers go out with the first chunk when it already arrived (one write instead of two); otherwise
    // now, so the client sees the stream open before the first token.
    if (!a.call.hasEarlyData) res.flushHeaders();
    d.metrics.streams.inc();
    const cut = () => a.call.abort(shuttingDown());
    d.shutdown?.addEventListener('abort', cut);
    if (d.shutdown?.aborted) cut();
    try {
      return await relaySse(
        a.call,
        res,
        !body.wantsUsage,
        () => res.destroyed && !res.writableFinished,
        ep.format,
        maxEventBytes(requestBytes),
        undefined,
        body.severalChoices === true,
        maxPassedEventBytes(ep.format, requestBytes),
      );
    } finally {
      d.shutdown?.removeEventListener('abort', cut);
      d.metrics.streams.dec();
    }
  }

  return { method: 'POST', pattern: ep.pattern, handler: handle, doc: ep.doc, auth: ep.scope, meteredAdmit: true };
}
