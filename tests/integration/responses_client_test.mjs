// The official `openai` npm client's Responses API (client.responses.*)
// against the dense service (a random-weight test model with Qwen3's chat
// template; tool_choice forces the calls, so the model does call a tool):
// a function-tool loop (function_call -> function_call_output) continued by
// previous_response_id, by resending the items and by an item_reference, the same call
// streamed and assembled by the client (equal to the whole answer at
// temperature 0), a structured output (text.format json_schema), stored
// responses retrieved and deleted, store: false, and errors as the SDK's
// typed exceptions. THINKING_URL serves the same model with Qwen3.5's
// template (its generation prompt opens a reasoning block): reasoning
// items, whole and streamed, and sent back.
// Usage: node responses_client_test.mjs BASE_URL MODEL THINKING_URL
// (beside a node_modules holding `openai`; see responses_http_test.sh).
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [baseURL, model, thinkingURL] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'not-needed', maxRetries: 0 });

const tools = [{
  type: 'function',
  name: 'get_weather',
  description: 'Get the current weather for a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string', enum: ['Oslo', 'Paris'] } },
    required: ['city'],
    additionalProperties: false,
  },
  strict: true,
}];
const base = { model, temperature: 0, instructions: 'You check the weather.', tools };
const forced = { ...base, max_output_tokens: 200, tool_choice: { type: 'function', name: 'get_weather' } };

// 1. The forced call: a function_call item.
const first = await client.responses.create({ ...forced, input: 'Weather in Oslo?' });
assert.equal(first.object, 'response');
assert.match(first.id, /^resp_/);
assert.equal(first.status, 'completed', JSON.stringify(first));
const call = first.output.find((i) => i.type === 'function_call');
assert.ok(call, JSON.stringify(first.output));
assert.equal(call.name, 'get_weather');
assert.match(call.call_id, /^call_/);
assert.ok(['Oslo', 'Paris'].includes(JSON.parse(call.arguments).city), call.arguments);
assert.equal(first.usage.total_tokens, first.usage.input_tokens + first.usage.output_tokens);
assert.equal(typeof first.usage.input_tokens_details.cached_tokens, 'number');
assert.equal(first.usage.output_tokens_details.reasoning_tokens, 0);
assert.equal(first.instructions, 'You check the weather.');
assert.equal(first.store, true);
assert.equal(first.model, model);

// 2a. The output goes back by previous_response_id: the stored conversation
// (instructions given again, as OpenAI does not carry them over) renders
// before it, and its start comes from the prefix cache.
const output = { type: 'function_call_output', call_id: call.call_id, output: '-3 C, snow' };
const byId = await client.responses.create({
  ...base, max_output_tokens: 6, previous_response_id: first.id, input: [output],
});
assert.ok(['completed', 'incomplete'].includes(byId.status));
assert.equal(byId.previous_response_id, first.id);
assert.ok(byId.usage.input_tokens > first.usage.input_tokens + 5,
  `the earlier turn was not rendered: ${JSON.stringify(byId.usage)} vs ${first.usage.input_tokens}`);
assert.ok(byId.usage.input_tokens_details.cached_tokens > 0, JSON.stringify(byId.usage));

// 2b. The same turn by resending the items (store: false, as Codex does):
// the same prompt, so the same answer at temperature 0.
const resent = await client.responses.create({
  ...base, max_output_tokens: 6, store: false,
  input: [{ role: 'user', content: 'Weather in Oslo?' }, ...first.output, output],
});
assert.equal(resent.usage.input_tokens, byId.usage.input_tokens);
assert.deepEqual(resent.output.map((i) => ({ ...i, id: '' })), byId.output.map((i) => ({ ...i, id: '' })));
assert.equal(resent.store, false);
await assert.rejects(client.responses.retrieve(resent.id),
  (e) => e instanceof OpenAI.NotFoundError && e.status === 404);

// 2c. The same again with the call sent as an item_reference to the stored
// response's item (as the Vercel AI SDK sends items while store is true).
const byRef = await client.responses.create({
  ...base, max_output_tokens: 6, store: false,
  input: [{ role: 'user', content: 'Weather in Oslo?' }, { type: 'item_reference', id: call.id }, output],
});
assert.equal(byRef.usage.input_tokens, byId.usage.input_tokens);
assert.deepEqual(byRef.output.map((i) => ({ ...i, id: '' })), byId.output.map((i) => ({ ...i, id: '' })));
await assert.rejects(
  client.responses.create({ ...base, input: [{ type: 'item_reference', id: 'fc_0-0_0' }] }),
  (e) => e instanceof OpenAI.NotFoundError && e.param === 'input[0].id');

// 3. Streamed: the client assembles the same response from the events.
const stream = client.responses.stream({ ...forced, input: 'Weather in Oslo?' });
const seen = [];
stream.on('event', (e) => seen.push(e));
let args = '';
stream.on('response.function_call_arguments.delta', (e) => { args += e.delta; });
const streamed = await stream.finalResponse();
// (The stream helper adds parsed_arguments to strict tools' calls.)
const strip = (items) => items.map(({ parsed_arguments, ...i }) => ({ ...i, id: '', call_id: '' }));
assert.deepEqual(strip(streamed.output), strip(first.output));
assert.equal(streamed.usage.output_tokens, first.usage.output_tokens);
assert.equal(args, call.arguments);
assert.deepEqual(seen.slice(0, 2).map((e) => e.type), ['response.created', 'response.in_progress']);
assert.equal(seen.at(-1).type, 'response.completed');
seen.forEach((e, i) => assert.equal(e.sequence_number, i));
for (const t of ['response.output_item.added', 'response.function_call_arguments.done',
  'response.output_item.done']) {
  assert.ok(seen.some((e) => e.type === t), t);
}

// Text streamed: output_text deltas add up to the message's text.
const textStream = await client.responses.create({ ...base, max_output_tokens: 8, input: 'Hi', stream: true });
let text = '', done = null;
for await (const e of textStream) {
  if (e.type === 'response.output_text.delta') text += e.delta;
  if (e.type === 'response.completed' || e.type === 'response.incomplete') done = e.response;
}
assert.ok(done, 'no response.completed / response.incomplete');
assert.equal(done.status, 'incomplete');
assert.equal(done.incomplete_details.reason, 'max_output_tokens');
assert.equal(text, done.output_text ?? done.output.filter((i) => i.type === 'message')
  .flatMap((i) => i.content).map((c) => c.text).join(''));

// 4. Structured output: text.format json_schema (strict, as zod / the
// Agents SDK send it): the message is JSON valid under the schema.
const structured = await client.responses.create({
  temperature: 0, max_output_tokens: 120, input: 'A city and a temperature.',
  text: { format: { type: 'json_schema', name: 'weather', strict: true, schema: {
    type: 'object',
    properties: { city: { type: 'string', enum: ['Oslo', 'Paris'] }, celsius: { type: 'integer' } },
    required: ['city', 'celsius'], additionalProperties: false,
  } } },
});
const value = JSON.parse(structured.output_text);
assert.equal(structured.model, model);  // no model sent: the served one
assert.ok(['Oslo', 'Paris'].includes(value.city), structured.output_text);
assert.equal(Number.isInteger(value.celsius), true, structured.output_text);

// 5. Stored responses: retrieve, delete, then 404.
const got = await client.responses.retrieve(first.id);
assert.deepEqual(got, first);
await client.responses.delete(first.id);
await assert.rejects(client.responses.retrieve(first.id), (e) => e instanceof OpenAI.NotFoundError);
await assert.rejects(
  client.responses.create({ ...base, previous_response_id: first.id, input: 'x' }),
  (e) => e instanceof OpenAI.NotFoundError && e.param === 'previous_response_id');

// 6. Errors: OpenAI's shape, naming the field.
await assert.rejects(
  client.responses.create({ model, input: 'x', tools: [{ type: 'file_search', vector_store_ids: ['v'] }] }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools[0].type' && /file_search/.test(e.message));
await assert.rejects(
  client.responses.create({ model, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x' }] }] }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'input[0].content[0].type');
await assert.rejects(
  client.responses.create({ model: 'no-such-model', input: 'x' }),
  (e) => e instanceof OpenAI.NotFoundError);

// 7. Reasoning (Qwen3.5's template opens a reasoning block): a reasoning
// item before the message, its text in content (and in the summary when
// one is asked), streamed as reasoning_text deltas, and sent back.
const thinker = new OpenAI({ baseURL: thinkingURL, apiKey: 'not-needed', maxRetries: 0 });
const reasoned = await thinker.responses.create({
  model, temperature: 0, max_output_tokens: 40, input: 'Hi', reasoning: { effort: 'medium', summary: 'auto' },
});
const rs = reasoned.output[0];
assert.equal(rs.type, 'reasoning', JSON.stringify(reasoned.output));
assert.ok(rs.content[0].text.length > 0);
assert.equal(rs.summary[0].text, rs.content[0].text);
assert.ok(reasoned.usage.output_tokens_details.reasoning_tokens > 0, JSON.stringify(reasoned.usage));
let reasoningText = '';
const rstream = await thinker.responses.create({
  model, temperature: 0, max_output_tokens: 40, input: 'Hi', reasoning: { effort: 'medium', summary: 'auto' },
  stream: true,
});
for await (const e of rstream) if (e.type === 'response.reasoning_text.delta') reasoningText += e.delta;
assert.equal(reasoningText, rs.content[0].text);
const off = await thinker.responses.create({
  model, temperature: 0, max_output_tokens: 8, input: 'Hi', reasoning: { effort: 'none' },
});
assert.ok(!off.output.some((i) => i.type === 'reasoning'), JSON.stringify(off.output));
const back = await thinker.responses.create({
  model, temperature: 0, max_output_tokens: 4, store: false,
  input: [{ role: 'user', content: 'Hi' }, ...reasoned.output, { role: 'user', content: 'More' }],
});
assert.ok(['completed', 'incomplete'].includes(back.status));
console.log('responses client test: ok');
