// The script pipe's RESP2 codec: commands encode with byte lengths, and replies decode the same however the socket splits them.
import t from 'tap';
import { encodeCommand, RespReader, type Reply } from '../../src/store/resp-reader.ts';

/** Errors compared by message (tap's deep equality would not look inside them). */
type Plain = number | string | null | { error: string } | Plain[];
function plain(r: Reply): Plain {
  if (r instanceof Error) return { error: r.message };
  if (Array.isArray(r)) return r.map(plain);
  return r;
}

/** Feeds the chunks in order and returns every reply, normalised. */
function decode(...chunks: (string | Buffer)[]): { replies: Plain[]; reader: RespReader } {
  const replies: Plain[] = [];
  const reader = new RespReader((r) => replies.push(plain(r)));
  for (const c of chunks) reader.feed(typeof c === 'string' ? Buffer.from(c, 'utf8') : c);
  return { replies, reader };
}

t.test('encodeCommand writes a RESP array of bulk strings', async (t) => {
  t.equal(encodeCommand(['SET', 'k', 'v']), '*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n', 'ASCII arguments carry their lengths');
  t.equal(encodeCommand([]), '*0\r\n', 'no arguments is an empty array');
  t.equal(encodeCommand(['']), '*1\r\n$0\r\n\r\n', 'an empty string is a zero-length bulk');
  t.equal(
    encodeCommand(['é', '€', '😀', 'naïve']),
    '*4\r\n$2\r\né\r\n$3\r\n€\r\n$4\r\n😀\r\n$6\r\nnaïve\r\n',
    'multi-byte UTF-8 arguments carry their byte length, not their character count',
  );
  t.equal(
    encodeCommand(['EVALSHA', 'abc', 2, 0, -7, 1712345678901]),
    '*6\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n2\r\n$1\r\n0\r\n$2\r\n-7\r\n$13\r\n1712345678901\r\n',
    'numbers are sent as their decimal text',
  );
  t.equal(encodeCommand(['a\r\nb']), '*1\r\n$4\r\na\r\nb\r\n', 'CRLF inside an argument is counted, not escaped');
});

t.test('an encoded command reads back as the same strings', async (t) => {
  const args = ['EVAL', 'return 1', 1, 'k:{acct:é}', '😀 x', '', 'a\r\nb', 42];
  const { replies } = decode(encodeCommand(args));
  t.same(replies, [args.map(String)], 'encoder and reader agree on framing');
});

t.test('scalar replies', async (t) => {
  t.same(decode(':0\r\n', ':42\r\n', ':-5\r\n').replies, [0, 42, -5], 'integers become numbers');
  // Integers are read from their bytes; every one must be what Number() makes of its text, to the last
  // digit (a balance in micro-credits), short and long, negative, and at the edges of exact doubles.
  const texts = [
    '-0',
    '9',
    '-1',
    '1712345678901',
    '999999999999999',
    '1000000000000000',
    '-4503599627370497',
    '9007199254740993',
    '123456789012345678901',
  ];
  for (let i = 0; i < 2000; i++) texts.push(String(Math.floor((Math.random() - 0.5) * 2 * 10 ** (1 + (i % 17)))));
  const read = decode(...texts.map((x) => `:${x}\r\n`)).replies;
  t.ok(
    texts.every((x, i) => Object.is(read[i], Number(x))),
    `${texts.length} integers read as Number() reads their text`,
  );
  t.same(decode('*2\r\n$3\r\nabc\r\n:7\r\n').replies, [['abc', 7]], 'lengths read the same way');
  t.same(decode('+OK\r\n', '+\r\n').replies, ['OK', ''], 'simple strings become strings');
  const errs: Reply[] = [];
  new RespReader((r) => errs.push(r)).feed(Buffer.from('-NOSCRIPT No matching script. Please use EVAL.\r\n'));
  t.equal(errs.length, 1, 'one error reply');
  t.ok(errs[0] instanceof Error, 'an error reply is an Error value');
  t.equal((errs[0] as Error).message, 'NOSCRIPT No matching script. Please use EVAL.', 'the error message is the line after "-"');
});

t.test('bulk strings', async (t) => {
  t.same(decode('$5\r\nhello\r\n').replies, ['hello'], 'a bulk string is its content');
  t.same(decode('$0\r\n\r\n').replies, [''], '"$0" is the empty string');
  t.same(decode('$-1\r\n').replies, [null], '"$-1" is nil');
  const text = 'héllo €😀';
  t.same(decode(`$${Buffer.byteLength(text)}\r\n${text}\r\n`).replies, [text], 'UTF-8 content is decoded by byte length');
  t.same(decode('$4\r\na\r\nb\r\n').replies, ['a\r\nb'], 'CRLF inside a bulk string is content');
  t.same(decode('$15\r\n1712345678901-0\r\n').replies, ['1712345678901-0'], 'a stream id');
});

t.test('arrays', async (t) => {
  t.same(decode('*3\r\n:1\r\n:100\r\n:5\r\n').replies, [[1, 100, 5]], 'an array of integers');
  t.same(decode('*0\r\n').replies, [[]], 'an empty array');
  t.same(decode('*-1\r\n').replies, [null], '"*-1" is nil');
  t.same(
    decode('*4\r\n*2\r\n:1\r\n*1\r\n$1\r\nx\r\n$-1\r\n+OK\r\n-ERR inner\r\n').replies,
    [[[1, ['x']], null, 'OK', { error: 'ERR inner' }]],
    'nested arrays mixing every type',
  );
});

t.test('several replies in one chunk arrive in order', async (t) => {
  const { replies, reader } = decode(':1\r\n+OK\r\n$3\r\nabc\r\n*2\r\n:7\r\n$-1\r\n-ERR x\r\n:2\r\n');
  t.same(replies, [1, 'OK', 'abc', [7, null], { error: 'ERR x' }, 2], 'one callback per reply, in wire order');
  t.equal(reader.pending, 0, 'nothing held back');
});

t.test('a partial reply is held back until its end arrives', async (t) => {
  const { replies, reader } = decode(':1\r\n*3\r\n:1\r\n:1');
  t.same(replies, [1], 'the complete reply is delivered at once');
  t.equal(reader.pending, Buffer.byteLength('*3\r\n:1\r\n:1'), 'pending counts the partial reply from its start');
  reader.feed(Buffer.from('00\r\n:5\r\n'));
  t.same(replies, [1, [1, 100, 5]], 'the rest completes it');
  t.equal(reader.pending, 0, 'nothing held back once complete');
  reader.feed(Buffer.from('$3\r\nab'));
  t.same(replies, [1, [1, 100, 5]], 'a bulk string missing its last byte is not delivered');
  reader.feed(Buffer.from('c\r'));
  t.same(replies, [1, [1, 100, 5]], 'nor one missing its final LF');
  reader.feed(Buffer.from('\n'));
  t.same(replies, [1, [1, 100, 5], 'abc'], 'the final LF completes it');
});

// A realistic reply stream: hold, settle (bulk stream id), NOSCRIPT, nil, empty, UTF-8, CRLF inside a bulk.
const utf8 = 'modèle 😀 €';
const STREAM = Buffer.from(
  '*3\r\n:1\r\n:100\r\n:5\r\n' +
    '*4\r\n$15\r\n1712345678901-0\r\n:0\r\n:900\r\n:0\r\n' +
    '-NOSCRIPT No matching script. Please use EVAL.\r\n' +
    '*3\r\n:0\r\n:-20\r\n:1234567890123\r\n' +
    '$-1\r\n' +
    '*0\r\n' +
    '*-1\r\n' +
    '$0\r\n\r\n' +
    `$${Buffer.byteLength(utf8)}\r\n${utf8}\r\n` +
    '*2\r\n*2\r\n$4\r\na\r\nb\r\n+OK\r\n:9\r\n' +
    '+PONG\r\n',
  'utf8',
);

t.test('a reply stream decodes the same however it is split', async (t) => {
  const whole = decode(STREAM);
  t.same(
    whole.replies,
    [
      [1, 100, 5],
      ['1712345678901-0', 0, 900, 0],
      { error: 'NOSCRIPT No matching script. Please use EVAL.' },
      [0, -20, 1234567890123],
      null,
      [],
      null,
      '',
      utf8,
      [['a\r\nb', 'OK'], 9],
      'PONG',
    ],
    'fed whole, every reply decodes',
  );
  const expected = JSON.stringify(whole.replies);

  const check = (chunks: Buffer[]): string | undefined => {
    const { replies, reader } = decode(...chunks);
    if (JSON.stringify(replies) !== expected) return `replies differ: ${JSON.stringify(replies)}`;
    if (reader.pending !== 0) return `pending ${reader.pending} after the last chunk`;
    return undefined;
  };

  const twoWay: string[] = [];
  for (let i = 0; i <= STREAM.length; i++) {
    const bad = check([STREAM.subarray(0, i), STREAM.subarray(i)]);
    if (bad) twoWay.push(`split at ${i}: ${bad}`);
  }
  t.same(twoWay, [], `split in two at each of ${STREAM.length + 1} byte boundaries: same replies, nothing pending`);

  const threeWay: string[] = [];
  for (let i = 0; i <= STREAM.length; i++) {
    for (let j = i; j <= STREAM.length; j++) {
      const bad = check([STREAM.subarray(0, i), STREAM.subarray(i, j), STREAM.subarray(j)]);
      if (bad) threeWay.push(`split at ${i} and ${j}: ${bad}`);
    }
  }
  t.same(threeWay.slice(0, 5), [], 'split in three at every pair of byte boundaries: same replies, nothing pending');

  const bytes: Buffer[] = [];
  for (let i = 0; i < STREAM.length; i++) bytes.push(STREAM.subarray(i, i + 1));
  t.equal(check(bytes), undefined, 'fed one byte at a time: same replies, nothing pending');

  // Pending grows while a reply is incomplete and drops to 0 the moment it completes.
  const reader = new RespReader(() => {});
  let maxPending = 0;
  for (const b of bytes) {
    reader.feed(b);
    maxPending = Math.max(maxPending, reader.pending);
  }
  t.ok(maxPending > 0, 'pending counted the bytes of an incomplete reply');
  t.equal(reader.pending, 0, 'pending is 0 after the last byte');
});

t.test('reset() drops a partial reply', async (t) => {
  const { replies, reader } = decode('*3\r\n:1\r\n:1');
  t.ok(reader.pending > 0, 'a partial reply is held');
  reader.reset();
  t.equal(reader.pending, 0, 'reset() drops it');
  reader.feed(Buffer.from(':7\r\n$2\r\nok\r\n'));
  t.same(replies, [7, 'ok'], 'a fresh feed decodes from its own start, not glued to the old partial reply');
  t.equal(reader.pending, 0, 'nothing pending');
});

t.test('reset() inside onReply stops the rest of that chunk', async (t) => {
  const got: Plain[] = [];
  let resetAfter = 1;
  const reader = new RespReader((r) => {
    got.push(plain(r));
    if (got.length === resetAfter) reader.reset();
  });
  reader.feed(Buffer.from(':1\r\n:2\r\n:3\r\n'));
  t.same(got, [1], 'replies behind the reset in the same chunk are not delivered');
  t.equal(reader.pending, 0, 'nothing of the old chunk is kept');

  resetAfter = 2;
  reader.feed(Buffer.from(':4\r\n:5\r\n*2\r\n:6'));
  t.same(got, [1, 4], 'the next feed delivers again, up to the next reset');
  t.equal(reader.pending, 0, 'a partial reply behind the reset is dropped too');

  reader.feed(Buffer.from(':8\r\n:9\r\n'));
  t.same(got, [1, 4, 8, 9], 'later feeds decode normally');
});

t.test('an unknown type byte throws', async (t) => {
  const got: Plain[] = [];
  const reader = new RespReader((r) => got.push(plain(r)));
  t.throws(() => reader.feed(Buffer.from('?what\r\n')), /unexpected RESP type byte 0x3f/, 'a top-level unknown type');
  t.throws(
    () => reader.feed(Buffer.from(':1\r\n*1\r\n%1\r\n')),
    /unexpected RESP type byte 0x25/,
    'an unknown type inside an array (a RESP3 map)',
  );
  t.same(got, [1], 'replies before the bad one were delivered');
  reader.reset();
  reader.feed(Buffer.from(':3\r\n'));
  t.same(got, [1, 3], 'after reset() the reader decodes a fresh feed');
});
