// The console's templates escape by default (src/console/html.ts): data can never become markup.
import t from 'tap';
import { html, raw, escapeHtml } from '../../src/console/html.ts';

t.test('interpolated values are escaped; fragments and raw() are not', async (t) => {
  const evil = `"><script>alert('x')</script>&`;
  t.equal(
    html`<p title="${evil}">${evil}</p>`.value,
    `<p title="&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;">&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;</p>`,
  );
  t.equal(
    html`<div>${html`<b>${'<i>'}</b>`}</div>`.value,
    '<div><b>&lt;i&gt;</b></div>',
    'nested fragments stay markup, their values escaped',
  );
  t.equal(html`${raw('<hr />')}`.value, '<hr />');
  t.equal(escapeHtml(`&<>"'`), '&amp;&lt;&gt;&quot;&#39;');
});

// Prettier reformats html`…` literals as HTML; `h` keeps this exact-output case as written.
const h = html;

t.test('lists join, and null, undefined and false render nothing', async (t) => {
  t.equal(h`<ul>${['<a>', h`<li>b</li>`, ['c', 1]]}</ul>`.value, '<ul>&lt;a&gt;<li>b</li>c1</ul>');
  t.equal(html`[${null}${undefined}${false}${0}${''}]`.value, '[0]', '0 is a value, not nothing');
  t.equal(String(html`<i>${'x'}</i>`), '<i>x</i>');
});
