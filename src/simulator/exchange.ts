/**
 * One request/response pair in flight: tracks whether the client went away, gives sleeps that end
 * early when it does, and writes with backpressure. Keeping this apart lets the chat responder read as
 * the sequence of what it sends.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { preciseNow, type Recorder, type RecordedRequest } from './record.ts';
import { GARBAGE, type SimEncoder } from './encode.ts';

/** A live exchange; see createExchange. */
export interface Exchange {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly rec: RecordedRequest;
  /** True once the socket closed, the response finished, or the simulator cut it. */
  readonly done: boolean;
  /** Waits `ms`; resolves early (without error) when the exchange ends, so timers never hold the process. */
  sleep(ms: number): Promise<void>;
  /** Writes one SSE chunk and counts it; false means the socket buffer is full: await drain() before more. */
  writeChunk(s: string, tokens: number): boolean;
  /** From now on chunks and the end go through `encoder` (flushed after each chunk) into the response. */
  encodeWith(encoder: SimEncoder): void;
  /** Flushes the encoder, then sends bytes no decoder accepts and ends the response (a steered corrupt body). */
  corrupt(): void;
  /** Resolves on 'drain', or at once when nothing waits to drain or the exchange is over (a closed socket never drains). */
  drain(): Promise<void>;
  /** Ends the response normally. */
  end(s?: string | Buffer): void;
  /** Flushes what was written, then closes the socket without finishing the response (a steered break). */
  cut(): void;
  /** Destroys the socket at once (a steered refusal). */
  refuse(): void;
  /** Tells waiters the record changed. */
  changed(): void;
}

/** Wraps req/res, records the end of the exchange and whether the client aborted. */
export function createExchange(req: IncomingMessage, res: ServerResponse, rec: RecordedRequest, recorder: Recorder): Exchange {
  let done = false;
  let selfClosed = false;
  let wake: (() => void) | undefined;
  let timer: NodeJS.Timeout | undefined;
  let encoder: SimEncoder | undefined;

  /** Runs `then` once everything written to the encoder is in the response (nothing to wait for without one). */
  const flushed = (then: () => void): void => {
    const e = encoder;
    if (e === undefined) return then();
    e.flush(() => {
      // What the pipe has not handed over yet (the response was full) goes first, in order.
      e.unpipe(res);
      const rest = e.read() as Buffer | null;
      if (rest !== null && !done) res.write(rest);
      then();
    });
  };

  const finish = (aborted: boolean): void => {
    if (done) return;
    done = true;
    rec.endedAt = preciseNow();
    rec.aborted = aborted;
    rec.finished = !aborted && !selfClosed;
    if (timer !== undefined) clearTimeout(timer);
    wake?.();
    recorder.changed(rec);
  };
  /** Closes the socket after what was written, without finishing the response. */
  const cutSocket = (): void => {
    const socket = res.socket;
    if (socket === null) return void res.destroy();
    // headersSent is already true after writeHead() even though nothing left yet; flushing twice is a no-op.
    res.flushHeaders();
    // res.write() corks until the next tick and keeps chunked writes in the response, not the
    // socket: uncork fully or socket.end() would close before the last chunks were handed over.
    while (res.writableCorked > 0) res.uncork();
    // end() flushes what was written before the FIN; destroy afterwards so a client that keeps its
    // half open cannot hold the socket (http server sockets allow half-open).
    socket.end(() => socket.destroy());
  };
  res.once('finish', () => finish(false));
  // 'close' without 'finish' first: the socket went away mid-response. Ours (cut/refuse) or the client's.
  res.once('close', () => {
    finish(!selfClosed && !res.writableFinished);
    encoder?.destroy();
  });

  const x: Exchange = {
    req,
    res,
    rec,
    get done() {
      return done;
    },
    sleep(ms) {
      if (done || ms <= 0) return Promise.resolve();
      return new Promise((resolve) => {
        wake = () => {
          wake = undefined;
          timer = undefined;
          resolve();
        };
        timer = setTimeout(wake, ms);
      });
    },
    writeChunk(s, tokens) {
      if (done) return true;
      let ok;
      if (encoder === undefined) ok = res.write(s);
      else {
        ok = encoder.write(s);
        encoder.flush(() => {});
      }
      rec.chunksSent++;
      rec.completionTokensSent += tokens;
      recorder.changed(rec);
      return ok;
    },
    drain() {
      if (encoder !== undefined) return done || !encoder.writableNeedDrain ? Promise.resolve() : drained(encoder, res);
      // uncork() can flush and emit 'drain' synchronously, before anyone listens: ask, don't only wait.
      return done || !res.writableNeedDrain ? Promise.resolve() : drained(res, res);
    },
    end(s) {
      if (done) return;
      if (encoder === undefined) res.end(s);
      else encoder.end(s); // the pipe ends the response after the encoder's last bytes
    },
    encodeWith(e) {
      encoder = e;
      e.pipe(res);
    },
    corrupt() {
      if (done) return;
      flushed(() => {
        if (!done) res.end(GARBAGE);
      });
    },
    cut() {
      if (done) return;
      selfClosed = true;
      flushed(cutSocket);
    },
    refuse() {
      if (done) return;
      selfClosed = true;
      req.socket.destroy();
    },
    changed() {
      recorder.changed(rec);
    },
  };
  return x;
}

/** Resolves on `w`'s 'drain' or the response's 'close' (a closed socket never drains). */
function drained(w: NodeJS.WritableStream, res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const go = (): void => {
      w.removeListener('drain', go);
      res.off('close', go);
      resolve();
    };
    w.on('drain', go);
    res.on('close', go);
  });
}
