// Placeholder until the front part's pages land.
"use strict";
