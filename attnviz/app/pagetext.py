"""What the page says and the small scripts its events run (no gradio import): the intro
texts, and the page-side snippets that hand a click in the page (a candidate token, a beam
node, a compare cell, a what-if source token, an encoder head asked for) to a hidden button's
event, the pattern every in-page click uses to reach Python."""

from __future__ import annotations

INTRO = (
    "# attnviz — attention inspector\n"
    "Type an input (for a decoder-only model, a prompt to continue), then **Step** through "
    "greedy decoding one token at a time and watch the attention matrices grow; an "
    "encoder-only model (BERT) **Read**s a sentence in one pass and fills its mask tokens. "
    "Every weight shown is the one the model used in that forward "
    "pass. Grey cells are *masked* (blocked by construction); dark purple cells are weights "
    "the model *learned* to be near zero."
)
#: The Mask lab's intro, by model kind (a decoder-only model has no source tokens to hide).
MASK_INTRO = {
    "encoder-decoder": (
        "Switch a mask off or hide source tokens, and compare the attention and the output "
        "with the masks as trained. Your input runs in a batch with a companion input of "
        "another length, so there is padding to unmask."
    ),
    "decoder-only": (
        "Switch the causal mask off and compare the self-attention over prompt + output and "
        "the output with the masks as trained (the model is teacher-forced on its own "
        "output). Your prompt runs in a batch with a companion prompt of another length, so "
        "there is padding to unmask."
    ),
}
VIZ_TEMPLATE = '<div class="av-root"></div>'
VIZ_ON_LOAD = """
window.AttnViz.mount(element);
if (props.value) window.AttnViz.apply(props.value);
watch('value', () => window.AttnViz.apply(props.value));
"""
UPLOAD_LABEL = "…or upload a checkpoint"  # short: a long label covers the drop zone's icon
UPLOAD_HELP = (
    "model.safetensors + config.json (+ snapshots.safetensors), a Hugging Face folder's "
    "files (config, safetensors weights, tokenizer files), or one .zip of the folder"
)


def upload_help(cap: str) -> str:
    """The upload's help with its cap (``cap``: ``"2 GB"``) and what to do above it."""
    return (
        f"{UPLOAD_HELP}. At most **{cap}** a file (`attnviz app --max-upload SIZE`); "
        "a larger model: start the app with `attnviz app --model PATH`."
    )


# Events that draw figures read the page's theme (the OS preference gradio follows) first.
THEME_JS = (
    "(...a) => { a[a.length - 1] = document.body.classList.contains('dark') ? 'dark' : 'light';"
    " return a; }"
)
ALIGN_INTRO = (
    "Reads each cross-attention head as a word aligner: every target word is linked to the "
    "source word its head attends to most, and the links are scored against gold links with "
    "the alignment error rate (AER, lower is better). **Lens**: attention *weights*, *norms* "
    "(weight × size of what the key adds) or *rollout* (through the layers, heads averaged). "
    "**Setting**: *output* reads the row that predicts a word; *input* the row where the word "
    "is fed in."
)
FORCE_JS = (
    "(...a) => { a[a.length - 1] = (window.AttnViz && window.AttnViz.pending) || ''; return a; }"
)
# the Compare tab's grid: a click on a head cell hands "kind layer head" to the hidden pick
# button's event (PICK_JS reads it, with the page's theme, into its last two inputs)
COMPARE_ON_LOAD = """
element.addEventListener('click', (ev) => {
  const b = ev.target.closest && ev.target.closest('[data-kind][data-layer][data-head]');
  if (!b) return;
  window.AVComparePick = `${b.dataset.kind} ${b.dataset.layer} ${b.dataset.head}`;
  const go = document.querySelector('#compare-pick-btn');
  if (go) go.click();
});
"""
PICK_JS = (
    "(...a) => { a[a.length - 2] = window.AVComparePick || ''; a[a.length - 1] = "
    "document.body.classList.contains('dark') ? 'dark' : 'light'; return a; }"
)
BEAM_NODE_JS = (
    "(...a) => { a[a.length - 2] = (window.AttnViz && window.AttnViz.beamPending) || '';"
    " a[a.length - 1] = document.body.classList.contains('dark') ? 'dark' : 'light'; return a; }"
)
# the encoder layer/head (or the thumbnails) a long input's page asks for (AV.encPending)
ENC_JS = (
    "(...a) => { a[a.length - 1] = (window.AttnViz && window.AttnViz.encPending) || ''; return a; }"
)
# the step view's layer/head menus changed: the page keeps "kind layer head" in AV.viewPending
# and presses the hidden view button, so the Reference and beam-node heatmaps follow it
VIEW_JS = "(...a) => { a[a.length - 1] = (window.AttnViz && window.AttnViz.viewPending) || ''; return a; }"
STALE = "<i>The input, step or model changed since this was computed: run it again.</i>"
# a source token clicked in the what-if strip: the page sets its position and presses the
# hidden what-if button, whose event reads it (the force-a-token pattern)
WHATIF_JS = (
    "(...a) => { a[a.length - 1] = (window.AttnViz && window.AttnViz.pendingWhatIf) || '';"
    " return a; }"
)
WHATIF_ON_LOAD = """
const go = (t) => {
  const c = t && t.closest && t.closest('[data-src-pos]');
  const b = document.querySelector('#whatif-btn');
  if (!c || !b) return;
  window.AttnViz = window.AttnViz || {};
  window.AttnViz.pendingWhatIf = c.dataset.srcPos;
  b.click();
};
element.addEventListener('click', (e) => go(e.target));
element.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); go(e.target); }
});
"""
# the Export tab's files follow the step view's pieces | words switch (#unit-select)
UNIT_JS = (
    "(...a) => { const s = document.querySelector('#unit-select');"
    " a[a.length - 1] = (window.AttnViz && window.AttnViz.unit && window.AttnViz.unit())"
    " || (s && s.value) || 'pieces'; return a; }"
)
