// The Import a run page: its form (data-long-submit) shows the zip's upload progress, then a counter
// while the server imports it; all of that is the shared long_submit.js.
import "./long_submit.js";
