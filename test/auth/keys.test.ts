import t from 'tap';
import { createHash } from 'node:crypto';
import { KEY_FORMAT, generateKey, generateKeyId, hashKey, isWellFormedKey } from '../../src/auth/keys.ts';
import { BASE58_ALPHABET } from '../../src/http/base58.ts';

const B58 = '[1-9A-HJ-NP-Za-km-z]';

t.test('generated keys have the SPEC §1.1 shape for each env', async (t) => {
  for (const env of ['live', 'test'] as const) {
    for (let i = 0; i < 50; i++) {
      const k = generateKey(env);
      t.match(k, new RegExp(`^svc-${env}-${B58}{32}$`));
      t.equal(k.length, 41);
      t.ok(isWellFormedKey(k));
      t.ok(KEY_FORMAT.test(k));
    }
  }
});

t.test('keys do not repeat and use the whole alphabet', async (t) => {
  const seen = new Set<string>();
  const chars = new Set<string>();
  for (let i = 0; i < 2000; i++) {
    const k = generateKey('live');
    seen.add(k);
    for (const c of k.slice(9)) chars.add(c);
  }
  t.equal(seen.size, 2000);
  // 64,000 draws over 58 symbols: every symbol shows up (each is missed with probability ~e^-1100).
  t.equal(chars.size, 58);
  for (const c of chars) t.ok(BASE58_ALPHABET.includes(c), `${c} is base58`);
});

t.test('key ids are key_ + 16 base58', async (t) => {
  const ids = new Set<string>();
  for (let i = 0; i < 200; i++) {
    const id = generateKeyId();
    t.match(id, new RegExp(`^key_${B58}{16}$`));
    ids.add(id);
  }
  t.equal(ids.size, 200);
});

t.test('hashKey is the SHA-256 hex of the full string', async (t) => {
  t.equal(hashKey('abc'), 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad', 'FIPS 180-2 test vector');
  const k = generateKey('test');
  t.equal(hashKey(k), createHash('sha256').update(k).digest('hex'));
  t.match(hashKey(k), /^[0-9a-f]{64}$/);
  t.notOk(hashKey(k).includes(k.slice(9)), 'the hash does not carry the key');
  t.not(hashKey(k), hashKey(k.slice(0, -1) + (k.endsWith('z') ? 'y' : 'z')), 'one character changes the hash');
});

t.test('isWellFormedKey refuses anything off the format', async (t) => {
  const body = '2'.repeat(32);
  t.ok(isWellFormedKey(`svc-live-${body}`));
  t.ok(isWellFormedKey(`svc-test-${body}`));
  const bad = [
    '',
    'svc-live-',
    `svc-prod-${body}`,
    `SVC-live-${body}`,
    `svc-live-${body}2`,
    `svc-live-${body.slice(1)}`,
    `svc-live-${body.slice(1)}0`,
    `svc-live-${body.slice(1)}O`,
    `svc-live-${body.slice(1)}I`,
    `svc-live-${body.slice(1)}l`,
    `svc-live-${body.slice(1)}-`,
    ` svc-live-${body}`,
    `svc-live-${body} `,
    `svc_live_${body}`,
    `sk-${body}`,
    `svc-live-${body.slice(1)}é`,
  ];
  for (const k of bad) t.notOk(isWellFormedKey(k), JSON.stringify(k));
});
