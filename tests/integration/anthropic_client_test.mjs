// The official `@anthropic-ai/sdk` npm client against the dense service's
// Anthropic Messages API (a random-weight test model with Qwen3's chat
// template; tool_choice forces the calls, so the model does call a tool):
// a tool loop (tool_use -> tool_result -> answer), the same call streamed
// and assembled by the client (equal to the whole answer at temperature 0),
// a structured output (output_config.format),
// the raw event sequence, count_tokens, Claude Code's changing billing line
// answered from the prefix cache, and errors as the SDK's typed exceptions.
// THINKING_URL serves the same model with Qwen3.5's template (its generation
// prompt opens a reasoning block): thinking blocks streamed and whole,
// thinking disabled, and a thinking block sent back.
// Usage: node anthropic_client_test.mjs BASE_URL API_KEY MODEL THINKING_URL
// (beside a node_modules holding @anthropic-ai/sdk; see anthropic_http_test.sh).
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

const [baseURL, apiKey, model, thinkingURL] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0 });

const tools = [{
  name: 'get_weather',
  description: 'Get the current weather for a city',
  input_schema: {
    type: 'object',
    properties: { city: { type: 'string', enum: ['Oslo', 'Paris'] } },
    required: ['city'],
  },
}];
const ask = [{ role: 'user', content: 'Weather in Oslo?' }];
const base = { model, temperature: 0, system: 'You check the weather.', tools };
const forced = { ...base, max_tokens: 200, tool_choice: { type: 'tool', name: 'get_weather' } };

// 1. The forced call: a tool_use block whose input the client parsed.
const first = await client.messages.create({ ...forced, messages: ask });
assert.equal(first.type, 'message');
assert.equal(first.role, 'assistant');
assert.match(first.id, /^msg_/);
assert.equal(first.stop_reason, 'tool_use', JSON.stringify(first));
const use = first.content.find((b) => b.type === 'tool_use');
assert.ok(use, JSON.stringify(first.content));
assert.equal(use.name, 'get_weather');
assert.ok(['Oslo', 'Paris'].includes(use.input.city), JSON.stringify(use.input));
const firstPrompt = first.usage.input_tokens + first.usage.cache_read_input_tokens;

// 2. The result goes back; the answer renders both (a longer prompt).
const history = [...ask,
  { role: 'assistant', content: first.content },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '-3 C, snow' }] }];
const second = await client.messages.create({ ...base, max_tokens: 6, messages: history });
assert.ok(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(second.stop_reason));
assert.equal(second.usage.output_tokens <= 6, true);
assert.ok(second.usage.input_tokens + second.usage.cache_read_input_tokens > firstPrompt + 5,
  `tool result not rendered: ${JSON.stringify(second.usage)} vs ${firstPrompt}`);
// The conversation's start came from the prefix cache.
assert.ok(second.usage.cache_read_input_tokens > 0, JSON.stringify(second.usage));

// 3. Streamed: the client assembles the same message from the events.
const stream = client.messages.stream({ ...forced, messages: ask });
const seen = [];
stream.on('streamEvent', (e) => seen.push(e.type));
const streamed = await stream.finalMessage();
assert.equal(streamed.stop_reason, 'tool_use');
const strip = (content) => content.map((b) => (b.type === 'tool_use' ? { ...b, id: '' } : b));
assert.deepEqual(strip(streamed.content), strip(first.content));
assert.equal(streamed.usage.output_tokens, first.usage.output_tokens);
assert.equal(seen[0], 'message_start');
assert.equal(seen.at(-1), 'message_stop');
assert.equal(seen.at(-2), 'message_delta');
assert.ok(seen.includes('content_block_start') && seen.includes('content_block_stop'), seen.join());

// Raw events (stream: true): every event the documented sequence allows
// (the SDK passes no ping on; the curl check in the script sees it).
const raw = await client.messages.create({ ...base, max_tokens: 5, messages: ask, stream: true });
const types = [];
for await (const event of raw) types.push(event.type);
assert.equal(types[0], 'message_start');
assert.deepEqual(types.slice(-2), ['message_delta', 'message_stop']);
for (const t of types) {
  assert.ok(['message_start', 'ping', 'content_block_start', 'content_block_delta',
    'content_block_stop', 'message_delta', 'message_stop'].includes(t), t);
}

// Structured output (output_config.format): one text block, JSON valid
// under the schema; Claude Code's context_management is accepted.
const structured = await client.messages.create({
  model, max_tokens: 200, temperature: 0, messages: ask,
  output_config: { format: { type: 'json_schema', schema: tools[0].input_schema } },
  context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
});
assert.equal(structured.content.length, 1, JSON.stringify(structured.content));
assert.equal(structured.content[0].type, 'text');
assert.ok(['Oslo', 'Paris'].includes(JSON.parse(structured.content[0].text).city),
  structured.content[0].text);
assert.equal(structured.stop_reason, 'end_turn');

// 4. count_tokens: the prompt the first request ran.
const counted = await client.messages.countTokens({
  model, system: base.system, tools, tool_choice: forced.tool_choice, messages: ask,
});
assert.equal(counted.input_tokens, firstPrompt);

// 5. Claude Code's billing line, its cch changing: the second request
// reads the rest of the prompt from the prefix cache.
const rules = Array.from({ length: 12 }, (_, i) => `Rule ${i}: answer in one word.`).join(' ');
const billed = async (cch) => client.messages.create({
  model, max_tokens: 1, temperature: 0, messages: [{ role: 'user', content: 'Hi' }],
  system: [
    { type: 'text', text: `x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=${cch};` },
    { type: 'text', text: `You are a test agent. ${rules}`, cache_control: { type: 'ephemeral' } },
  ],
});
const b1 = await billed('a5145');
const b2 = await billed('0aaa9');
const prompt = b2.usage.input_tokens + b2.usage.cache_read_input_tokens;
assert.equal(prompt, b1.usage.input_tokens + b1.usage.cache_read_input_tokens);
assert.ok(b2.usage.cache_read_input_tokens >= prompt - 64 && b2.usage.cache_read_input_tokens > 0,
  `billing line defeats the cache: ${JSON.stringify(b2.usage)}`);

// The model list and object as the SDK reads them.
const page = await client.models.list();
assert.equal(page.data[0].id, model);
assert.equal(page.has_more, false);
const one = await client.models.retrieve(model);
assert.deepEqual([one.type, one.id, one.display_name], ['model', model, model]);

// 6. Errors: the SDK's typed exceptions with Anthropic's error body.
await assert.rejects(
  client.messages.create({ ...base, max_tokens: 4, messages: ask, model: 'no-such-model' }),
  (e) => e instanceof Anthropic.NotFoundError && e.status === 404 &&
    e.error?.type === 'error' && e.error?.error?.type === 'not_found_error');
await assert.rejects(
  client.messages.create({ ...base, max_tokens: 4, messages: ask, top_p: 3 }),
  (e) => e instanceof Anthropic.BadRequestError && e.status === 400 &&
    e.error?.error?.type === 'invalid_request_error' && /^top_p: /.test(e.error.error.message));
await assert.rejects(
  client.messages.create({ ...base, max_tokens: 4, messages: ask, frequency_penalty: 1 }),
  (e) => e instanceof Anthropic.BadRequestError &&
    e.error?.error?.message === 'frequency_penalty: Extra inputs are not permitted');
const stranger = new Anthropic({ baseURL, apiKey: 'wrong-key', maxRetries: 0 });
await assert.rejects(
  stranger.messages.create({ ...base, max_tokens: 4, messages: ask }),
  (e) => e instanceof Anthropic.AuthenticationError && e.status === 401 &&
    e.error?.error?.type === 'authentication_error');
// Thinking: the reasoning comes as a thinking block (with an empty
// signature), streamed as the whole; disabled, no thinking block; a
// thinking block sent back is accepted.
const thinker = new Anthropic({ baseURL: thinkingURL, apiKey, maxRetries: 0 });
const hi = { model, max_tokens: 8, temperature: 0, messages: [{ role: 'user', content: 'Hi' }] };
const thought = await thinker.messages.create({ ...hi, thinking: { type: 'adaptive' } });
assert.equal(thought.content[0].type, 'thinking', JSON.stringify(thought.content));
assert.ok(thought.content[0].thinking.length > 0);
assert.equal(thought.content[0].signature, '');
const thoughtStream = thinker.messages.stream({ ...hi, thinking: { type: 'adaptive' } });
const thinkingDeltas = [];
thoughtStream.on('thinking', (delta) => thinkingDeltas.push(delta));
assert.deepEqual((await thoughtStream.finalMessage()).content, thought.content);
assert.equal(thinkingDeltas.join(''), thought.content[0].thinking);
const plain = await thinker.messages.create({ ...hi, thinking: { type: 'disabled' } });
assert.ok(plain.content.every((b) => b.type === 'text'), JSON.stringify(plain.content));
// Structured output is the JSON as generated, not read as reasoning.
const format = { format: { type: 'json_schema', schema: tools[0].input_schema } };
const json = await thinker.messages.create({ ...hi, max_tokens: 200, output_config: format });
assert.deepEqual(json.content.map((b) => b.type), ['text'], JSON.stringify(json.content));
assert.ok(['Oslo', 'Paris'].includes(JSON.parse(json.content[0].text).city));
const jsonStreamed = await thinker.messages.stream({ ...hi, max_tokens: 200, output_config: format }).finalMessage();
assert.deepEqual(jsonStreamed.content, json.content);
const again = await thinker.messages.create({ ...hi, messages: [...hi.messages,
  { role: 'assistant', content: [...thought.content, { type: 'text', text: 'Hello.' }] },
  { role: 'user', content: 'And now?' }] });
assert.equal(again.type, 'message');
console.log('anthropic client test: ok');
