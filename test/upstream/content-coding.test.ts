// An upstream answer's content coding (src/upstream/content-coding.ts): which `content-encoding` values
// are decoded, refused or plain, and the streaming Decoder — every coding back to its bytes whatever the
// chunking, an empty body, a broken one, and a reader that stops: the decoder stops with it.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { brotliCompressSync, deflateRawSync, deflateSync, gzipSync, zstdCompressSync } from 'node:zlib';
import {
  contentCoding,
  decodeWhole,
  Decoder,
  DecodingError,
  UnsupportedCodingError,
  type Coding,
} from '../../src/upstream/content-coding.ts';
import { waitFor } from '../helpers/wait.ts';
import { gzipBomb } from '../helpers/gzip-bomb.ts';

t.test('contentCoding: none, one known coding, or refused', async (t) => {
  for (const v of [undefined, '', 'identity', ' Identity ', ['identity']]) t.equal(contentCoding(v), undefined, JSON.stringify(v));
  const known: [string | string[], Coding][] = [
    ['gzip', 'gzip'],
    ['GZip', 'gzip'],
    [' x-gzip ', 'gzip'],
    ['deflate', 'deflate'],
    ['br', 'br'],
    ['zstd', 'zstd'],
    [['br'], 'br'],
    ['identity, gzip', 'gzip'],
  ];
  for (const [v, want] of known) t.equal(contentCoding(v), want, JSON.stringify(v));
  // compress (LZW) is not zlib's; stacked codings are not decoded (no model server stacks them).
  for (const v of ['compress', 'x-compress', 'sdch', 'gzip, br', ['gzip', 'gzip'], 'aes128gcm']) {
    t.throws(() => contentCoding(v), UnsupportedCodingError, JSON.stringify(v));
    t.throws(() => contentCoding(v), { code: 'UPSTREAM_CONTENT_CODING' });
  }
});

/** Feeds `input` in chunks of `size` and collects what comes out. */
async function decode(coding: Coding, input: Buffer, size: number): Promise<{ out: Buffer; error?: DecodingError }> {
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    const d = new Decoder(coding, {
      data: (c) => parts.push(c),
      end: () => resolve({ out: Buffer.concat(parts) }),
      error: (error) => resolve({ out: Buffer.concat(parts), error }),
      drain: () => {},
    });
    d.resume();
    for (let at = 0; at < input.length; at += size) d.write(input.subarray(at, at + size));
    d.end();
  });
}

const TEXT = Buffer.from(Array.from({ length: 3000 }, (_, i) => `data: {"choices":[{"delta":{"content":"tok${i} é😀"}}]}\n\n`).join(''));

t.test('every coding decodes back to its bytes, whatever the chunking (deflate: zlib or raw)', async (t) => {
  const cases: [Coding, Buffer, string][] = [
    ['gzip', gzipSync(TEXT), 'gzip'],
    ['deflate', deflateSync(TEXT), 'deflate (zlib format)'],
    ['deflate', deflateRawSync(TEXT), 'deflate (raw, as some servers send it)'],
    ['br', brotliCompressSync(TEXT), 'br'],
    ['zstd', zstdCompressSync(TEXT), 'zstd'],
  ];
  for (const [coding, input, name] of cases) {
    for (const size of [1, 7, 4096, input.length]) {
      const { out, error } = await decode(coding, input, size);
      t.equal(error, undefined, `${name} in ${size}-byte chunks: no error`);
      t.ok(out.equals(TEXT), `${name} in ${size}-byte chunks: the same bytes`);
    }
  }
});

t.test('an empty body under a content-encoding is empty; a broken one is a DecodingError', async (t) => {
  for (const coding of ['gzip', 'deflate', 'br', 'zstd'] as const) {
    const { out, error } = await decode(coding, Buffer.alloc(0), 1);
    t.equal(error, undefined, `${coding}: empty is not broken`);
    t.equal(out.length, 0);
  }
  const gz = gzipSync(TEXT);
  const broken: [Coding, Buffer, string][] = [
    ['gzip', gz.subarray(0, gz.length >> 1), 'gzip cut half-way'],
    ['gzip', Buffer.concat([gz.subarray(0, 100), Buffer.alloc(64, 0xff), gz.subarray(164)]), 'gzip with bad bytes'],
    ['br', brotliCompressSync(TEXT).subarray(0, 200), 'br cut'],
    ['zstd', Buffer.from('not zstd at all'), 'zstd: not zstd'],
    ['deflate', Buffer.from([0x78]), 'deflate: one byte'],
    ['gzip', Buffer.from('{"plain":"json"}'), 'gzip: plain bytes under the header'],
  ];
  for (const [coding, input, name] of broken) {
    const { error } = await decode(coding, input, 3000);
    t.type(error, DecodingError, name);
    t.match(error, { code: 'UPSTREAM_DECODING', message: new RegExp(`^upstream ${coding} body could not be decoded`) }, name);
  }
});

t.test('bounded: a reader that stops stops the decoder, and its input is refused (write false) until it reads again', async (t) => {
  // 512 MiB in ~0.5 MiB: a bomb, fed as fast as the decoder takes it.
  const bomb = gzipBomb('', 512, '');
  let delivered = 0;
  let full = true; // the reader takes one chunk, then is full
  let fed = 0;
  const feed = (): boolean => {
    while (fed < bomb.length) {
      const ok = d.write(bomb.subarray(fed, fed + 1024));
      fed += 1024;
      if (!ok) return false;
    }
    d.end();
    return true;
  };
  const d: Decoder = new Decoder('gzip', {
    data: (c) => {
      delivered += c.length;
      if (full) d.pause();
    },
    end: () => t.fail('not read to its end'),
    error: (e) => t.fail(String(e)),
    drain: () => feed(),
  });
  t.notOk(feed(), 'a decoder nobody reads refuses input long before the bomb is all in');
  const taken = fed;
  t.ok(taken <= 128 * 1024, `${taken} of ${bomb.length} bytes taken`);
  t.equal(delivered, 0, 'paused until resumed (the sink is attached then)');
  d.resume();
  await waitFor(() => delivered > 0, 2000, 'a decoded chunk');
  await sleep(100);
  const held = delivered;
  t.ok(held <= 64 * 1024, `one chunk delivered while its reader is full (${held} bytes), not the bomb`);
  await sleep(100);
  t.equal(delivered, held, 'nothing more while paused');
  // Reading on: input is taken again at each drain, and the decoder gives what it takes.
  full = false;
  d.resume();
  await waitFor(() => fed > taken + 64 * 1024, 20_000, 'more input to be taken after a drain');
  t.ok(delivered > held, 'decoding went on once read');
  d.destroy();
});

t.test('destroy() stops everything: nothing is reported afterwards', async (t) => {
  const events: string[] = [];
  const d = new Decoder('gzip', {
    data: () => events.push('data'),
    end: () => events.push('end'),
    error: () => events.push('error'),
    drain: () => events.push('drain'),
  });
  d.resume();
  d.write(gzipSync(TEXT));
  d.destroy();
  d.end();
  await sleep(50);
  t.same(events, []);
});

t.test('decodeWhole: the body, undefined past its bound, a DecodingError when broken', async (t) => {
  t.ok((await decodeWhole('br', brotliCompressSync(TEXT), TEXT.length))?.equals(TEXT), 'exactly at the bound');
  t.equal(await decodeWhole('gzip', gzipSync(TEXT), TEXT.length - 1), undefined, 'one byte past it');
  t.equal(await decodeWhole('gzip', gzipBomb('', 64, ''), 1024 * 1024), undefined, 'a bomb stops at the bound');
  await t.rejects(decodeWhole('zstd', Buffer.from('nope'), 100), DecodingError);
});
