// The tool-calling loop of the official `openai` npm client against the
// dense service (a random-weight test model with Qwen3's chat template, so
// the model itself will not call a tool): the request with tools is
// accepted and rendered (the tools reach the prompt), the response parses
// in the client with the OpenAI shapes, a `role: "tool"` result goes back
// and gets a second answer, and bad tool fields are 400 naming the field.
// Usage: node openai_tools_client_test.mjs BASE_URL (beside a node_modules
// holding `openai`; see openai_tools_test.sh).
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'not-needed', maxRetries: 0 });
const model = (await client.models.list()).data[0].id;

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Get the current weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const ask = [{ role: 'user', content: 'Weather in Oslo?' }];
const base = { model, max_tokens: 4, temperature: 0 };

function checkChoice(choice) {
  assert.equal(choice.message.role, 'assistant');
  assert.ok(['stop', 'length', 'tool_calls'].includes(choice.finish_reason), choice.finish_reason);
  for (const call of choice.message.tool_calls ?? []) {
    assert.match(call.id, /^call_/);
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, 'get_weather');
    JSON.parse(call.function.arguments);
  }
}

// The tools reach the template: the prompt grows by their description;
// tool_choice "none" leaves them out (as llama.cpp).
const plain = await client.chat.completions.create({ ...base, messages: ask });
const first = await client.chat.completions.create({ ...base, messages: ask, tools, tool_choice: 'auto' });
const none = await client.chat.completions.create({ ...base, messages: ask, tools, tool_choice: 'none' });
checkChoice(first.choices[0]);
assert.ok(first.usage.prompt_tokens > plain.usage.prompt_tokens + 20,
  `tools not rendered: ${first.usage.prompt_tokens} vs ${plain.usage.prompt_tokens}`);
assert.equal(none.usage.prompt_tokens, plain.usage.prompt_tokens);

// The loop: the assistant's call and the tool's result go back; the second
// request renders both (a longer prompt) and gets an answer.
const call = first.choices[0].message.tool_calls?.[0] ??
  { id: 'call_0', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } };
const history = [...ask,
  { role: 'assistant', content: null, tool_calls: [call] },
  { role: 'tool', tool_call_id: call.id, content: '{"temp": -3, "sky": "snow"}' }];
const second = await client.chat.completions.create({ ...base, messages: history, tools });
checkChoice(second.choices[0]);
assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens + 10,
  `tool turn not rendered: ${second.usage.prompt_tokens} vs ${first.usage.prompt_tokens}`);

// Streaming with tools: the client assembles the chunks.
const stream = await client.chat.completions.create({
  ...base, messages: history, tools, parallel_tool_calls: false, stream: true,
});
let finish = null, chunks = 0;
for await (const chunk of stream) {
  chunks++;
  for (const c of chunk.choices) if (c.finish_reason) finish = c.finish_reason;
}
assert.ok(chunks >= 2);
assert.ok(['stop', 'length', 'tool_calls'].includes(finish), String(finish));

// Bad tool fields: 400 with the field as `param`.
for (const [body, param] of [
  [{ tools: [{ type: 'function', function: { name: 'bad name' } }] }, 'tools'],
  [{ tools, tool_choice: 'sometimes' }, 'tool_choice'],
  [{ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice'],
  [{ tools, parallel_tool_calls: 'yes' }, 'parallel_tool_calls'],
  [{ messages: [...ask, { role: 'assistant', tool_calls: [{ id: 'c', type: 'function',
      function: { name: 'get_weather', arguments: '{not json' } }] }], tools }, 'messages'],
]) {
  await assert.rejects(
    client.chat.completions.create({ ...base, messages: ask, ...body }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === param,
    `expected a 400 on ${param}`);
}
console.log('openai tools client test: ok');
