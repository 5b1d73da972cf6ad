// Drives the dense service's HTTP API with the official `openai` npm client.
// Usage: node openai_client_test.mjs BASE_URL   (run from a folder whose
// node_modules holds `openai`; see openai_http_test.sh).
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'not-needed', maxRetries: 0 });

const models = await client.models.list();
assert.equal(models.data.length, 1);
const model = models.data[0].id;

const chat = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 6, temperature: 0,
  logprobs: true, top_logprobs: 2,
});
assert.equal(chat.object, 'chat.completion');
assert.equal(chat.choices[0].message.role, 'assistant');
assert.equal(chat.choices[0].finish_reason, 'length');
assert.equal(chat.usage.completion_tokens, 6);
assert.equal(chat.choices[0].logprobs.content.length, 6);
assert.equal(chat.choices[0].logprobs.content[0].top_logprobs.length, 2);

// Streaming gives the same text as the whole answer (greedy), then usage.
const stream = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 6, temperature: 0,
  stream: true, stream_options: { include_usage: true },
});
let text = '', finish = null, usage = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    text += c.delta.content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
}
assert.equal(text, chat.choices[0].message.content);
assert.equal(finish, 'length');
assert.equal(usage.completion_tokens, 6);

const comp = await client.completions.create({ model, prompt: 'Once upon', max_tokens: 4, temperature: 0 });
assert.equal(comp.object, 'text_completion');
assert.equal(comp.usage.completion_tokens, 4);

await assert.rejects(
  client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], top_p: 2 }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /top_p/.test(e.message));
await assert.rejects(
  client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
  (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
await assert.rejects(
  client.chat.completions.create({ model, messages: [] }),
  (e) => e.status === 400 && /messages must not be empty/.test(e.message));
console.log('openai client test: ok');
