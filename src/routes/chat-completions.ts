/**
 * POST /v1/chat/completions (SPEC §1.2, §2a, §4). The request's path, top to bottom:
 * authenticate → scope → read + validate → model → rate limit → credit hold → forward (pick upstream,
 * retry before the first byte) → relay + meter → settle (in a `finally` no abort can skip) → log.
 */
import type { ServerResponse } from 'node:http';
import { GatewayError } from '../http/errors.ts';
import { readJson } from '../http/body.ts';
import type { Route } from '../http/router.ts';
import type { RouteDoc } from '../http/openapi.ts';
import type { RequestContext } from '../http/context.ts';
import { requireModel, requireScope, type Authenticator } from '../auth/authenticate.ts';
import type { Config, ModelConfig } from '../config/schema.ts';
import type { Limits } from '../limits/limits.ts';
import type { Concurrency } from '../limits/concurrency.ts';
import type { BodyBudget } from '../limits/body-budget.ts';
import { holdTtlMs as holdTtlOf, type Credit } from '../credit/credit.ts';
import { costMicros } from '../credit/pricing.ts';
import { estimatePromptTokens } from '../credit/hold-estimate.ts';
import { createHeaderPolicy } from '../upstream/headers.ts';
import { ClientGoneError, forward, type Answered } from '../upstream/forward.ts';
import type { UpstreamCall } from '../upstream/call.ts';
import type { Upstreams } from '../upstream/pool.ts';
import { relayJson, relaySse, type RelayOutcome } from '../meter/relay.ts';
import { COUNT_BUDGET_MS, type Tokenizer } from '../meter/tokenizer.ts';
import { bound, type Metrics } from '../obs/metrics.ts';
import type { KeyRecord, UsageSource } from '../store/types.ts';
import { validateChatBody, type ChatBody } from './chat-validate.ts';

export interface ChatDeps {
  config: Config;
  /** Requests in flight per key (limits.max_concurrent_per_key). */
  concurrency: Concurrency;
  /** Request body bytes held across the process (limits.max_inflight_body_bytes). */
  bodyBudget: BodyBudget;
  auth: Authenticator;
  limits: Limits;
  credit: Credit;
  upstreams: Upstreams;
  tokenizer: Tokenizer;
  metrics: Metrics;
  now: () => number;
}

interface Billed {
  promptTokens: number;
  completionTokens: number;
  source: UsageSource;
}

/** The route's OpenAPI description: the fields validateChatBody checks; every other field passes through. */
const CHAT_DOC: RouteDoc = {
  summary: 'Create a chat completion (streamed with stream: true), metered and billed',
  auth: 'key',
  scope: 'chat',
  body: {
    type: 'object',
    required: ['model', 'messages'],
    additionalProperties: true,
    properties: {
      model: { type: 'string', minLength: 1 },
      messages: {
        type: 'array',
        minItems: 1,
        items: {
          type: 'object',
          required: ['role'],
          properties: {
            role: { enum: ['system', 'developer', 'user', 'assistant', 'tool'] },
            content: { type: ['string', 'array', 'null'] },
          },
        },
      },
      stream: { type: ['boolean', 'null'] },
      stream_options: { type: ['object', 'null'] },
      max_tokens: { type: ['integer', 'null'], exclusiveMinimum: 0, description: "clamped to the model's max_output_tokens" },
      max_completion_tokens: { type: ['integer', 'null'], exclusiveMinimum: 0 },
      n: { type: ['integer', 'null'], exclusiveMinimum: 0, description: 'at most limits.max_n' },
    },
  },
  responses: {
    200: { description: "The upstream's completion (JSON), or its stream (text/event-stream)", schema: { type: 'object' } },
    401: 'Missing or invalid key',
    402: 'Not enough credit for the hold',
    403: 'Key lacks the chat scope or the model',
    404: 'Unknown model',
    413: 'Body over limits.max_body_bytes',
    415: 'Not application/json',
    422: 'Invalid body',
    429: 'Rate, concurrency or failed-auth limit',
    502: 'Upstream failed',
    503: 'Upstream unavailable, store unavailable or overloaded',
    504: 'Upstream timed out',
  },
};

/** What a request carries past its body (see prepare). */
interface Prepared {
  model: ModelConfig;
  output: { perChoice: number; total: number };
  promptEstimate: number;
  payload: Buffer;
  reply: { model: string; stream: boolean; wantsUsage: boolean };
}

const NOTHING_PRODUCED: Billed = { promptTokens: 0, completionTokens: 0, source: 'estimated' };

/**
 * The output a request may produce, and so what its hold covers (SPEC §12): the requested maximum
 * (`max_completion_tokens`, else `max_tokens`) clamped to the model's cap, the cap when none was asked,
 * times `n` choices. A larger request is clamped, never refused.
 */
export function outputBound(body: ChatBody, model: ModelConfig): { perChoice: number; total: number } {
  const requested = body.max_completion_tokens ?? body.max_tokens ?? model.maxOutputTokens;
  const perChoice = Math.min(requested, model.maxOutputTokens);
  return { perChoice, total: perChoice * (body.n ?? 1) };
}

/**
 * Builds the upstream body: model rewritten, output capped by what was held, usage forced on streams.
 * Once per request, never per chunk. `max_tokens` is always sent (every OpenAI-compatible server reads
 * it), and `max_completion_tokens` too when the client sent that one, both the clamped value: without
 * them an upstream generates up to its own limit, past the hold.
 */
function upstreamBody(body: ChatBody, model: ModelConfig, perChoice: number): Buffer {
  const out: Record<string, unknown> = { ...body, model: model.upstreamModel, max_tokens: perChoice };
  if (body.max_completion_tokens !== undefined && body.max_completion_tokens !== null) out.max_completion_tokens = perChoice;
  if (body.stream === true) {
    const so = body.stream_options && typeof body.stream_options === 'object' ? body.stream_options : {};
    out.stream_options = { ...so, include_usage: true };
  }
  return Buffer.from(JSON.stringify(out));
}

export function chatRoutes(d: ChatDeps): Route[] {
  const models = new Map(d.config.models.map((m) => [m.name, m]));
  const up = d.config.upstream;
  const holdTtlMs = holdTtlOf(d.config);
  // Metric children bound once (labels: model / model, kind, source).
  const ttfb = bound(d.metrics.upstreamTtfb);
  const tokens = bound(d.metrics.tokens);
  const debited = bound(d.metrics.creditDebited);
  const overruns = bound(d.metrics.upstreamOverruns);
  const headerPolicy = createHeaderPolicy({ forward: up.forwardHeaders, return: up.returnHeaders });

  /** What to bill (SPEC §1.2): upstream usage when reported, else the tokenizer over what was produced. */
  /**
   * `promptEstimate` is the hold's byte bound; `messages()` re-reads the prompt from the upstream payload
   * (the parsed body is not kept: SPEC §12), only on the rare path where the upstream reported no usage.
   */
  async function bill(
    messages: () => unknown[],
    promptEstimate: number,
    answered: boolean,
    outcome: RelayOutcome | undefined,
    maxOutput: number,
  ): Promise<Billed> {
    // No answer from any upstream (or a refusal): nothing was produced, nothing is billed.
    if (!answered || !outcome) return NOTHING_PRODUCED;
    // A body too large to keep, without usage: its text was relayed, not kept. Bill what the request was
    // allowed to produce (the clamped max_tokens × n it was held for), never 0 for want of a buffer.
    if (!outcome.usage && outcome.uncounted) return { promptTokens: promptEstimate, completionTokens: maxOutput, source: 'estimated' };
    const extra = outcome.text();
    // The tokenizer (tens of MB and a fraction of a second to load: docs/notes.md §8) is only needed when
    // usage is missing: loaded on first need.
    // If it cannot load, bytes bound the tokens from above: over-billed at worst, never unbilled.
    if ((!outcome.usage || extra) && !d.tokenizer.loaded) await d.tokenizer.load().catch(() => {});
    // Counted in bounded slices with the event loop served between them (SPEC §12), one deadline per request.
    const budget = { deadline: Date.now() + COUNT_BUDGET_MS }; // wall time on this CPU, not the business clock
    const countText = (s: string) => (d.tokenizer.loaded ? d.tokenizer.countTextBounded(s, budget) : Promise.resolve(Buffer.byteLength(s)));
    if (outcome.usage) {
      const more = extra ? await countText(extra) : 0;
      return {
        promptTokens: outcome.usage.prompt_tokens,
        completionTokens: outcome.usage.completion_tokens + more,
        source: more > 0 ? 'estimated' : 'upstream',
      };
    }
    const prompt = d.tokenizer.loaded ? await d.tokenizer.countPromptTokensBounded(messages(), budget) : promptEstimate;
    return { promptTokens: prompt, completionTokens: extra ? await countText(extra) : 0, source: 'estimated' };
  }

  async function handle(ctx: RequestContext): Promise<void> {
    // Watch for the client leaving from the very start: a client gone during the hold's round trip must
    // still abort everything after it (otherwise the upstream runs until total_timeout_ms).
    const aborter = new AbortController();
    const onClose = () => {
      if (!ctx.res.writableFinished) aborter.abort();
    };
    ctx.res.once('close', onClose);
    try {
      await pipeline(ctx, aborter.signal);
    } finally {
      ctx.res.off('close', onClose);
    }
  }

  async function pipeline(ctx: RequestContext, signal: AbortSignal): Promise<void> {
    // The upstream attempt in flight; the client leaving aborts it, whenever that happens.
    let current: UpstreamCall | undefined;
    signal.addEventListener('abort', () => current?.abort(new ClientGoneError()), { once: true });
    const track = (c: UpstreamCall | undefined) => {
      current = c;
      if (c && signal.aborted) c.abort(new ClientGoneError());
    };
    const key = (ctx.key = await d.auth.authenticate(ctx.req));
    const { model, output, promptEstimate, payload, reply } = await prepare(ctx, key);
    ctx.log.model = model.name;
    const admission = await d.limits.admit(ctx, promptEstimate + output.total);
    const live = key.env === 'live';
    // The settle names its hold's expiry: that is where the store finds the hold (docs/ledger.md).
    const holdExpiresAtMs = Math.ceil(d.now() + holdTtlMs);
    /** The request's one settle (SPEC §4): not awaited by the response, tracked for shutdown, retried until it lands. */
    const settle = (b: Billed, costMicros: number) =>
      void d.credit.settle({
        account: key.account,
        requestId: ctx.requestId,
        costMicros,
        keyId: key.id,
        model: model.name,
        promptTokens: b.promptTokens,
        completionTokens: b.completionTokens,
        usageSource: b.source,
        ts: new Date(d.now()).toISOString(),
        holdExpiresAtMs,
      });
    if (live) {
      const hold = costMicros(model.price, promptEstimate, output.total);
      try {
        await d.credit.hold(key.account, ctx.requestId, hold, holdExpiresAtMs);
      } catch (err) {
        // The hold may have run in Redis after our command timed out: settle at 0 in the background (it lands
        // behind the hold, is idempotent, and stops a late hold), so the credit is not locked until the reaper.
        if ((err as GatewayError).code === 'store_unavailable') {
          settle(NOTHING_PRODUCED, 0);
        }
        throw err;
      }
      ctx.log.hold_micros = hold;
    }
    // Shutdown waits for this request's settle even while billing still awaits the tokenizer.
    const settleStarted = live ? d.credit.expect() : undefined;

    // From here on, whatever happens, the request is settled exactly once.
    const gone = () => !ctx.res.writableFinished && ctx.res.destroyed;
    const deadline = d.now() + up.totalTimeoutMs;
    // Past the total deadline the current attempt is cut; forward() tries no other upstream after it.
    const total = setTimeout(
      () => current?.abort(Object.assign(new Error('total upstream timeout'), { code: 'UND_ERR_HEADERS_TIMEOUT' })),
      up.totalTimeoutMs,
    );
    const t0 = process.hrtime.bigint();
    let answered: Answered | undefined;
    let outcome: RelayOutcome | undefined;
    try {
      answered = await forward(
        d,
        model,
        {
          path: '/chat/completions',
          body: payload,
          headersTimeoutMs: up.headersTimeoutMs,
          idleTimeoutMs: up.idleTimeoutMs,
          deadline,
          headers: (auth) => headerPolicy.upstreamRequest(ctx.req.headers, ctx.requestId, auth, payload.length),
        },
        signal,
        track,
      );
      if (signal.aborted) throw new ClientGoneError();
      ctx.log.upstream = answered.call.upstream.label;
      ctx.log.upstream_status = answered.status;
      ttfb(model.name).observe(Number(answered.waitedNs) / 1e9);
      outcome = await respond(ctx, answered, reply);
      if (outcome?.end === 'upstream_failed') {
        // A stream that broke after its first byte counts toward ejecting its upstream too.
        d.metrics.upstreamErrors.inc({ upstream: answered.call.upstream.label, reason: 'stream_broken' });
        d.upstreams.failed(answered.call.upstream, d.now());
      }
    } catch (err) {
      if (!(err instanceof ClientGoneError)) throw err;
    } finally {
      clearTimeout(total);
      const t1 = process.hrtime.bigint();
      const ok = answered !== undefined && answered.status >= 200 && answered.status < 300;
      const messages = () => (JSON.parse(payload.toString('utf8')) as { messages: unknown[] }).messages;
      const b = await bill(messages, promptEstimate, ok, outcome, output.total);
      const cost = costMicros(model.price, b.promptTokens, b.completionTokens);
      admission.settle(b.promptTokens + b.completionTokens);
      Object.assign(ctx.log, {
        prompt_tokens: b.promptTokens,
        completion_tokens: b.completionTokens,
        usage_source: b.source,
        cost_micros: cost,
        relay_end: outcome?.end ?? (gone() ? 'client_gone' : 'none'),
      });
      if (b.completionTokens > output.total) {
        // An upstream that ignored max_tokens: debited in full (SPEC §4's only overspend), counted, logged.
        overruns(model.name).inc();
        ctx.log.overrun_tokens = b.completionTokens - output.total;
      }
      if (b.promptTokens > 0) tokens(model.name, 'prompt', b.source).inc(b.promptTokens);
      if (b.completionTokens > 0) tokens(model.name, 'completion', b.source).inc(b.completionTokens);
      if (live) {
        if (cost > 0) debited(model.name).inc(cost);
        settle(b, cost);
        settleStarted?.(); // the settle itself is tracked from here on
      }
      // Arrival → upstream call, plus chunk handling, plus settling; upstream waiting excluded.
      ctx.overheadNs = t0 - ctx.start + (outcome?.chunkNs ?? 0n) + (process.hrtime.bigint() - t1);
    }
  }

  /**
   * Reads and validates the body and turns it into what the rest of the request needs: the model, the
   * output bound, the prompt's hold estimate, the upstream payload and the few facts the response needs.
   * The parsed body (its text and objects, 2–3× its bytes) dies with this call (SPEC §12); billing
   * re-reads the prompt from the payload in the rare case it must count it.
   */
  async function prepare(ctx: RequestContext, key: KeyRecord): Promise<Prepared> {
    let body: ChatBody, model: ModelConfig, bodyBytes: number;
    try {
      requireScope(key, 'chat');
      d.concurrency.enter(key.id, ctx.res);
      const read = await readJson(ctx.req, d.config.limits.maxBodyBytes, d.bodyBudget);
      // The body's bytes stay reserved until the request ends: its upstream payload lives that long.
      ctx.res.once('close', read.release);
      bodyBytes = read.bytes;
      body = validateChatBody(read.value, d.config.limits.maxN);
      const m = models.get(body.model);
      if (!m) throw new GatewayError('model_not_found', `The model '${body.model}' does not exist.`, { param: 'model' });
      requireModel(key, m.name);
      model = m;
    } catch (err) {
      // Every authenticated request counts against the request limit (SPEC §2a), refused ones too;
      // past the limit the 429 wins. One limiter call on every path.
      await d.limits.admit(ctx);
      throw err;
    }
    const output = outputBound(body, model);
    return {
      model,
      output,
      promptEstimate: estimatePromptTokens(body, bodyBytes),
      payload: upstreamBody(body, model, output.perChoice),
      reply: {
        model: body.model,
        stream: body.stream === true,
        wantsUsage: (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true,
      },
    };
  }

  /** Writes the response for an answered upstream call; returns what the relay metered. */
  async function respond(ctx: RequestContext, a: Answered, body: Prepared['reply']): Promise<RelayOutcome | undefined> {
    const res: ServerResponse = ctx.res;
    const headers = headerPolicy.clientResponse(a.headers);
    if (ctx.extraHeaders) Object.assign(headers, ctx.extraHeaders);
    if (a.status >= 500) {
      // A 500/501 is not retried (only 502/503/504/429 are) and its body may identify the upstream: 502.
      a.call.abort(new Error('upstream 5xx not relayed'));
      throw new GatewayError('upstream_error', `The upstream of model '${body.model}' failed.`);
    }
    // The relay follows what the upstream sent, not what was asked: an upstream that ignores `stream`
    // must still be metered from its own format.
    const ct = a.headers['content-type'];
    const stream = a.status < 300 && (typeof ct === 'string' ? ct.includes('text/event-stream') : body.stream);
    if (!stream && a.headers['content-length'] !== undefined) headers['content-length'] = a.headers['content-length'];
    res.writeHead(a.status, headers);
    if (stream) {
      // Headers go out with the first chunk when it already arrived (one write instead of two); otherwise
      // now, so the client sees the stream open before the first token.
      if (!a.call.hasEarlyData) res.flushHeaders();
      d.metrics.streams.inc();
      try {
        return await relaySse(a.call, res, !body.wantsUsage, () => res.destroyed && !res.writableFinished);
      } finally {
        d.metrics.streams.dec();
      }
    }
    return relayJson(a.call, res, () => res.destroyed && !res.writableFinished);
  }

  return [{ method: 'POST', pattern: '/v1/chat/completions', handler: handle, doc: CHAT_DOC }];
}
