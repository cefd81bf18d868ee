"""What gitreg keeps under `[storage] path`: atomic files and the storage bound (`files`),
bare mirrors, archives, and the moved-tag pins.

May import: `gitreg.core`, `gitreg.config`, `gitreg.git`.
"""
