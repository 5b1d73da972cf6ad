// llama.cpp (through node-llama-cpp's prebuilt CPU build) on the same GGUF,
// for a side-by-side prefill figure: after one warm-up evaluation of the same
// prompt (as llama-bench and `moesplit bench` warm up), a --prompt-token
// prompt evaluated into an empty context with --threads threads, --reps
// times (the mean; also the first, cold, run), then --gen greedy tokens (this decode
// figure includes node-llama-cpp's JavaScript loop per token; compare decode
// against llama-bench's numbers instead). Prints one JSON object.
//
//   node llamacpp_peer.mjs MODEL [--threads 2] [--prompt 512] [--gen 32] [--reps 3]
import {getLlama} from "node-llama-cpp";

const args = process.argv.slice(2);
const model_path = args[0];
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const threads = opt("--threads", 2), n_prompt = opt("--prompt", 512), n_gen = opt("--gen", 32);
const reps = opt("--reps", 3);

const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath: model_path, gpuLayers: 0});
const context = await model.createContext({
  contextSize: n_prompt + n_gen + 64, batchSize: n_prompt, threads, sequences: 1});
const seq = context.getSequence();

// The same deterministic token ids for every run: ordinary byte-range ids.
let state = 1n;
const prompt = [];
for (let i = 0; i < n_prompt; ++i) {
  state = (state * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
  prompt.push(Number(state >> 33n) % 256);
}
// Warm-up: the same prompt once (timed as the first prefill), then clear.
let t0 = performance.now();
await seq.evaluateWithoutGeneratingNewTokens(prompt);
const first_s = (performance.now() - t0) / 1000;
await seq.clearHistory();

let prefill_s = 0;
for (let r = 0; r < reps; ++r) {
  if (r > 0) await seq.clearHistory();
  t0 = performance.now();
  await seq.evaluateWithoutGeneratingNewTokens(prompt);
  prefill_s += (performance.now() - t0) / 1000 / reps;
}

t0 = performance.now();
let n = 0;
for await (const token of seq.evaluate([prompt[n_prompt - 1]], {temperature: 0})) {
  if (++n >= n_gen) break;
}
const decode_s = (performance.now() - t0) / 1000;
console.log(JSON.stringify({
  peer: "node-llama-cpp@3.21.1 (llama.cpp CPU build)", model: model_path, threads,
  prompt: n_prompt, reps, prefill_tok_s: n_prompt / prefill_s, prefill_first_tok_s: n_prompt / first_s,
  gen: n, decode_tok_s_js_loop: n / decode_s}));
await context.dispose();
await model.dispose();
