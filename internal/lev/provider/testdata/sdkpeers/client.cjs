// The official SDKs as clients of lev's recorded exchanges (TestSDKPeersParse): each
// sends the request body lev built through the SDK's own request builder to the Go
// test's recorded-exchange server, parses the reply with the SDK's own parser (the
// streaming helpers' accumulators for streams) and prints what it read, normalised, for
// the Go test to compare with what lev read from the same bytes.
// Usage: node client.cjs KIND BASE_URL  (lev's request body on stdin)
'use strict';
const { createRequire } = require('node:module');
const peers = process.env.LEV_SDK_PEERS;
if (!peers) { console.error('LEV_SDK_PEERS is not set'); process.exit(2); }
const req = createRequire(peers.replace(/\/$/, '') + '/package.json');
const OpenAI = req('openai').default || req('openai');
const Anthropic = req('@anthropic-ai/sdk').default || req('@anthropic-ai/sdk');

const [kind, baseURL] = process.argv.slice(2);
const body = JSON.parse(require('node:fs').readFileSync(0, 'utf8'));

function fromChat(c) {
  const ch = c.choices[0];
  return {
    text: ch.message.content || '',
    tool_calls: (ch.message.tool_calls || []).map((t) => ({ id: t.id, name: t.function.name, args: JSON.parse(t.function.arguments || '{}') })),
    stop: ch.finish_reason,
    usage: c.usage ? { input_tokens: c.usage.prompt_tokens, output_tokens: c.usage.completion_tokens } : null,
  };
}

function fromMessage(m) {
  let text = '';
  const calls = [];
  const sources = [];
  for (const b of m.content) {
    if (b.type === 'text') {
      text += b.text;
      for (const c of b.citations || []) if (c.url) sources.push({ title: c.title, url: c.url });
    } else if (b.type === 'tool_use') calls.push({ id: b.id, name: b.name, args: b.input });
    else if (b.type === 'web_search_tool_result' && Array.isArray(b.content)) {
      for (const r of b.content) if (r.type === 'web_search_result') sources.push({ title: r.title, url: r.url });
    }
  }
  return { text, tool_calls: calls, stop: m.stop_reason, usage: { input_tokens: m.usage.input_tokens, output_tokens: m.usage.output_tokens }, sources };
}

function fromResponse(r) {
  const sources = [];
  for (const item of r.output) {
    if (item.type !== 'message') continue;
    for (const c of item.content) for (const a of c.annotations || []) if (a.type === 'url_citation') sources.push({ title: a.title, url: a.url });
  }
  return { text: r.output_text, tool_calls: [], stop: r.status, usage: { input_tokens: r.usage.input_tokens, output_tokens: r.usage.output_tokens }, sources };
}

async function main() {
  const oa = new OpenAI({ apiKey: 'sk-test', baseURL, maxRetries: 0 });
  const an = new Anthropic({ apiKey: 'sk-ant-test', baseURL, maxRetries: 0 });
  let out;
  switch (kind) {
    case 'openai-chat':
      out = fromChat(await oa.chat.completions.create(body));
      break;
    case 'openai-chat-stream': {
      const { stream, ...rest } = body;
      out = fromChat(await oa.chat.completions.stream(rest).finalChatCompletion());
      break;
    }
    case 'openai-responses':
      out = fromResponse(await oa.responses.create(body));
      break;
    case 'anthropic':
      out = fromMessage(await an.messages.create(body));
      break;
    case 'anthropic-stream': {
      const { stream, ...rest } = body;
      out = fromMessage(await an.messages.stream(rest).finalMessage());
      break;
    }
    default:
      throw new Error('unknown kind ' + kind);
  }
  process.stdout.write(JSON.stringify(out));
}
main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
