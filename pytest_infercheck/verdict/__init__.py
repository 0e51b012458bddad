"""The verdict discipline, once for every kind: measures that are a value or unmeasured
(:mod:`.measure`), gates that judge them (:mod:`.gate`), the rules on how an item's gathering
went (:mod:`.conduct`) and waivers that apply only to what was judged (:mod:`.waiver`).
Pure: no I/O, no kind named."""
