// `npm run demo` prints console links that work: the member link opens the demo account's keys, the
// operator link the account list (SPEC §9, issue 14's "done when").
import t from 'tap';
import { startDemo } from '../cli/run-cli.ts';

t.test('the demo prints a member link and an operator link that sign in', async (t) => {
  const out = await startDemo(t);
  const member = /member of "demo"\s+(http\S+)/.exec(out)?.[1];
  const operator = /operator\s+(http\S+)/.exec(out)?.[1];
  t.ok(member && operator, 'both links printed');
  const open = async (link: string) => {
    const res = await fetch(link, { redirect: 'manual' });
    const cookie = res.headers.get('set-cookie')!.split(';')[0]!;
    const origin = new URL(link).origin;
    const home = await fetch(`${origin}/console/`, { headers: { cookie }, redirect: 'manual' });
    return { origin, cookie, location: home.headers.get('location') };
  };
  const m = await open(member!);
  t.equal(m.location, '/console/accounts/demo/keys');
  const keys = await (await fetch(`${m.origin}${m.location}`, { headers: { cookie: m.cookie } })).text();
  t.match(keys, /demo live key/, "the demo account's keys");
  t.equal((await open(operator!)).location, '/console/accounts');
});
