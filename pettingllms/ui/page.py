"""The demo page (one self-contained HTML document; the report fragment comes from the server)."""
import json

EXAMPLES = {
    "math": "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
            "clips in May. How many clips did Natalia sell altogether in April and May?",
    "code": "Write a Python function is_palindrome(s) that returns True when the string s reads "
            "the same forwards and backwards, ignoring case and spaces.",
}

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>MetaAgent-X demo</title>
<style>
body{font-family:system-ui,sans-serif;max-width:1150px;margin:18px auto;color:#1d2330;padding:0 12px}
textarea{width:100%;height:70px;font-size:14px}
button{padding:6px 14px;margin:6px 6px 6px 0;cursor:pointer}
#run{background:#2f5bd3;color:#fff;border:none;border-radius:4px}
#run:disabled{background:#8fa3d9}
.fields{display:grid;grid-template-columns:110px 1fr;gap:4px 10px;margin:10px 0;font-size:14px}
.fields>b{color:#4a5568}
#progress{display:none;align-items:center;gap:10px;margin:8px 0;color:#2f5bd3}
#progress.on{display:flex}
.spin{width:16px;height:16px;border:3px solid #c7d3f3;border-top-color:#2f5bd3;border-radius:50%;
 animation:sp 0.8s linear infinite}
@keyframes sp{to{transform:rotate(360deg)}}
#final{white-space:pre-wrap}
</style></head>
<body>
<h2>MetaAgent-X: a designer writes the multi-agent system, an executor runs it</h2>
<div id="model" style="color:#4a5568;font-size:13px"></div>
<textarea id="question" placeholder="Ask a math or coding question"></textarea>
<div>
 <button id="example-math" type="button">Example: math</button>
 <button id="example-code" type="button">Example: code</button>
 <button id="run" type="button">Run</button>
</div>
<div id="progress"><div class="spin"></div><span id="progress-text">working</span></div>
<div class="fields">
 <b>Status</b><span id="status">idle</span>
 <b>Task</b><span id="task"></span>
 <b>Final result</b><span id="final"></span>
 <b>Artifacts</b><span id="artifacts"></span>
</div>
<div id="report"></div>
<script>
const EXAMPLES = __EXAMPLES__;
const $ = (id) => document.getElementById(id);
$("example-math").onclick = () => { $("question").value = EXAMPLES.math; };
$("example-code").onclick = () => { $("question").value = EXAMPLES.code; };
fetch("/api/health").then(r => r.json()).then(h => {
  $("model").textContent = "designer: " + h.designer + " · executor: " + h.executor +
    (h.engine ? " · engine: " + h.engine : "") + " · sandbox: " + h.sandbox +
    (h.weights ? " · weights: " + h.weights : "");
});
function describe(p) {
  if (!p) return "working";
  if (p.stage === "designing") return "attempt " + p.attempt + ": the designer is writing a design";
  if (p.stage === "executing") return "attempt " + p.attempt + ": executing" +
    (p.round ? " (round " + p.round + ", " + p.calls + " node calls so far)" : "");
  return p.stage;
}
function show(s) {
  $("task").textContent = s.question || "";
  if (s.state === "queued" || s.state === "running") {
    $("status").textContent = s.state;
    $("progress").classList.add("on");
    $("progress-text").textContent = describe(s.progress) + " · " + s.elapsed_s + "s";
    return false;
  }
  $("progress").classList.remove("on");
  $("run").disabled = false;
  if (s.state === "error") { $("status").textContent = "error: " + s.error; return true; }
  const r = s.result;
  const via = r.source && r.source !== "designer" ? " by the " + r.source : "";
  $("status").textContent = (r.ok ? "done: ran to an answer" + via : "done: failed") + " (" +
    r.attempts + " attempt(s), " + r.node_calls + " node calls)";
  $("final").textContent = r.ok ? r.answer : (r.error || "no answer");
  $("artifacts").innerHTML = "";
  for (const url of s.artifacts) {
    const a = document.createElement("a");
    a.href = url; a.textContent = url.split("/").pop(); a.target = "_blank";
    a.style.marginRight = "10px";
    $("artifacts").appendChild(a);
  }
  $("report").innerHTML = s.html;
  return true;
}
async function poll(url) {
  const s = await (await fetch(url)).json();
  if (!show(s)) setTimeout(() => poll(url), 500);
}
$("run").onclick = async () => {
  $("run").disabled = true;
  $("report").innerHTML = ""; $("final").textContent = ""; $("artifacts").textContent = "";
  const resp = await fetch("/api/run", {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({question: $("question").value})});
  const body = await resp.json();
  if (!resp.ok) { $("status").textContent = "rejected: " + body.error; $("run").disabled = false; return; }
  $("status").textContent = "queued";
  poll(body.status_url);
};
</script>
</body></html>
"""

PAGE = PAGE.replace("__EXAMPLES__", json.dumps(EXAMPLES))
