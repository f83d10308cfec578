/**
 * One upstream attempt as an undici dispatch handler (NOTES §3: the cheapest way to proxy, and the
 * meter sees every byte). `started` resolves when the upstream's headers arrive; the route then decides
 * to retry (abort) or to stream, and attaches a sink. Backpressure is explicit: when the sink says the
 * client is full, the upstream read is paused until it drains. An answer with a content-encoding is
 * decoded on its way to the sink (content-coding.ts): the sink, the meter and the client see the
 * upstream's content, never its compressed bytes; one in a coding that cannot be decoded fails the call.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher } from 'undici';
import type { Attempt, Upstream } from './pool.ts';
import { contentCoding, Decoder, type Coding } from './content-coding.ts';

export interface Sink {
  /** Returns false when the client is full; `resume` is then called by the sink once it drains. */
  data(chunk: Buffer, resume: () => void): boolean;
  /**
   * The body ended: called in the same tick as the last `data`, before `done` resolves, so the client
   * response can end in the same socket write as its last bytes (after an `await` the end of a chunked
   * response is a write of its own); for a decoded answer, when the decoder ends, a tick or more later.
   * Not called when the body ended before `attach`. Must not throw.
   */
  end?(): void;
}

export type FailureKind = 'unavailable' | 'timeout' | 'error';

/** Classifies an undici error for retries, metrics and the final status (SPEC §2a). */
export function classify(err: unknown): { kind: FailureKind; reason: string } {
  const code = (err as { code?: string }).code ?? '';
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return { kind: 'timeout', reason: 'headers_timeout' };
  if (code === 'UND_ERR_BODY_TIMEOUT') return { kind: 'timeout', reason: 'idle_timeout' };
  if (code === 'UND_ERR_CONNECT_TIMEOUT') return { kind: 'unavailable', reason: 'connect_timeout' };
  if (
    code === 'ECONNREFUSED' ||
    code === 'ENOTFOUND' ||
    code === 'EHOSTUNREACH' ||
    code === 'ECONNRESET' ||
    code === 'UND_ERR_SOCKET' ||
    code === 'EAI_AGAIN'
  ) {
    return { kind: 'unavailable', reason: code === 'UND_ERR_SOCKET' ? 'socket' : code.toLowerCase() };
  }
  return { kind: 'error', reason: code ? code.toLowerCase() : 'error' };
}

/** The first body bytes keepHead() keeps: an answer's id is in its first event or its body's first key. */
const HEAD_MAX_BYTES = 4096;

export class UpstreamCall implements Dispatcher.DispatchHandler {
  readonly upstream: Upstream;
  /** The pool's record of this attempt (epoch, trial), for its success or failure (pool.ts). */
  readonly attempt: Attempt | undefined;
  readonly started: Promise<{ status: number; headers: IncomingHttpHeaders }>;
  readonly done: Promise<void>;
  private controller: Dispatcher.DispatchController | undefined;
  private sink: Sink | undefined;
  private early: Buffer[] = [];
  /** The body's first bytes, kept only after keepHead() (stateful requests). */
  private headChunks: Buffer[] | undefined;
  private headBytes = 0;
  private abortReason: Error | undefined;
  /**
   * The request, body included, was written to the upstream's connection (undici's onRequestSent): from
   * then on the upstream may be processing it. A non-streaming answer's headers come only once its whole
   * generation is done, so a timeout after this point may have cost the upstream a generation.
   */
  sent = false;
  /** Set when the answer has a content-encoding: its body goes through this to the sink. */
  private decoder: Decoder | undefined;
  private codingName: Coding | undefined;
  private resolveStart!: (v: { status: number; headers: IncomingHttpHeaders }) => void;
  private rejectStart!: (e: Error) => void;
  private resolveDone!: () => void;
  private rejectDone!: (e: Error) => void;
  private readonly resume = () => this.controller?.resume();

  constructor(upstream: Upstream, attempt?: Attempt) {
    this.upstream = upstream;
    this.attempt = attempt;
    this.started = new Promise((res, rej) => ((this.resolveStart = res), (this.rejectStart = rej)));
    this.done = new Promise((res, rej) => ((this.resolveDone = res), (this.rejectDone = rej)));
    // Either may be left unobserved when the attempt is abandoned.
    this.started.catch(() => {});
    this.done.catch(() => {});
  }

  /** The answer's content coding, decoded before the sink sees its bytes; undefined for a plain answer. */
  get coding(): Coding | undefined {
    return this.codingName;
  }

  /** True when body bytes arrived with the headers (before attach): the first write can carry both. */
  get hasEarlyData(): boolean {
    return this.early.length > 0;
  }

  /** From now on keeps the body's first bytes (up to 4 KiB, those already received included); see head(). */
  keepHead(): void {
    this.headChunks = [...this.early];
    for (const c of this.early) this.headBytes += c.length;
  }

  /** The first bytes of the body kept since keepHead(), as text ('' without keepHead). */
  head(): string {
    return this.headChunks ? Buffer.concat(this.headChunks).subarray(0, HEAD_MAX_BYTES).toString('utf8') : '';
  }

  /**
   * Set when the attempt was aborted while still queued for a connection: resolves once undici lets go of
   * the request (its body included), which for a queued request is only when a connection frees. Until
   * then the request's body is still held by the pool, so its bytes stay reserved (routes/metered.ts).
   */
  unqueued: Promise<void> | undefined;
  private resolveUnqueued: (() => void) | undefined;

  /** Aborts the upstream request (client gone, retry, timeout). */
  abort(reason: Error): void {
    this.abortReason ??= reason;
    if (this.controller) this.controller.abort(reason);
    // Not on a connection yet (queued in the pool behind upstream.max_connections, or its connection still
    // opening): undici lets go of it only once it gets one (onRequestStart, which then refuses it), seconds
    // later or at the end of another request's generation. The attempt ends now, unsent; the pool keeps the
    // request until then (`unqueued`).
    else {
      this.unqueued ??= new Promise((res) => (this.resolveUnqueued = res));
      this.fail(reason);
    }
    // The upstream may have ended while its decoder still has bytes to give: those are cut too.
    if (this.decoder) this.fail(reason);
  }

  /** Starts consuming the body into the sink; chunks that arrived before are delivered first. */
  attach(sink: Sink): void {
    this.sink = sink;
    const early = this.early;
    this.early = [];
    for (const c of early) if (!sink.data(c, this.resume)) this.controller?.pause();
    // A decoder waits for its sink (it keeps no decoded bytes before): it flows from now on.
    this.decoder?.resume();
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    // Aborted while it waited for a connection: thrown, not `controller.abort()`. undici's abort destroys the
    // connection the request was given (client-h1.js writeH1 `abort`), so each request abandoned in the queue
    // cost a new upstream connection for the one behind it (240 abandoned: 240 connections, the next tenant's
    // request 70 ms later on loopback, test/e2e/queued-abort-connections.test.ts). A throw here is caught by
    // writeH1 / writeH2, which error the request (onResponseError below, which lets `unqueued` go) and return
    // before anything touches the socket: the connection goes to the next request in the queue.
    if (this.abortReason) throw this.abortReason;
    this.controller = controller;
  }

  onRequestSent(): void {
    this.sent = true;
  }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (headers['content-encoding'] !== undefined) {
      let coding: Coding | undefined;
      try {
        coding = contentCoding(headers['content-encoding']);
      } catch (err) {
        // Unreadable: the upstream failed before its first byte (forward.ts tries the next one).
        this.fail(err as Error);
        controller.abort(err as Error);
        return;
      }
      if (coding) this.decode(coding, controller);
    }
    this.resolveStart({ status: statusCode, headers });
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.decoder) {
      if (!this.decoder.write(chunk)) controller.pause();
      return;
    }
    if (this.headChunks && this.headBytes < HEAD_MAX_BYTES) {
      this.headChunks.push(chunk);
      this.headBytes += chunk.length;
    }
    if (!this.sink) {
      this.early.push(chunk);
      return;
    }
    if (!this.sink.data(chunk, this.resume)) controller.pause();
  }

  onResponseEnd(): void {
    if (this.decoder) return this.decoder.end(); // done once the decoder has given every byte
    this.sink?.end?.();
    this.resolveDone();
  }

  onResponseError(_c: Dispatcher.DispatchController, err: Error): void {
    this.fail(err);
    this.resolveUnqueued?.();
  }

  private fail(err: Error): void {
    this.decoder?.destroy();
    this.rejectStart(err);
    this.rejectDone(err);
  }

  /** From now on the body goes through a decoder; its bytes reach the sink as a plain answer's would. */
  private decode(coding: Coding, controller: Dispatcher.DispatchController): void {
    this.codingName = coding;
    // Made here, not as a field: a plain answer's call allocates no closure for it.
    const resumeDecoder = () => this.decoder?.resume();
    this.decoder = new Decoder(coding, {
      data: (chunk) => {
        if (this.headChunks && this.headBytes < HEAD_MAX_BYTES) {
          this.headChunks.push(chunk);
          this.headBytes += chunk.length;
        }
        // The decoder is paused until attach, so a sink is there; a full one pauses the decoder, whose
        // full input then pauses the upstream (write() above).
        if (!this.sink) this.early.push(chunk);
        else if (!this.sink.data(chunk, resumeDecoder)) this.decoder?.pause();
      },
      end: () => {
        this.sink?.end?.();
        this.resolveDone();
      },
      // A body whose coding breaks mid-way is a body the upstream broke: the same path as a reset.
      error: (err) => {
        controller.abort(err);
        this.fail(err);
      },
      drain: () => controller.resume(),
    });
  }
}
