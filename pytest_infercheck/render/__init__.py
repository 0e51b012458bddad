"""Presentation primitives that check kinds and reports share: escaped HTML building blocks
(:mod:`.markup`), inline SVG charts (:mod:`.charts`), item-view pieces (:mod:`.views`),
fixed-width terminal tables (:mod:`.table`) and model output made safe for a terminal
(:mod:`.text`). Nothing here knows a check kind."""
