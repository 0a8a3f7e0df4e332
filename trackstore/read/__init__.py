"""Reading the store: run listing, part readers, the DuckDB views and their SQL guard, curves.

(Named ``read`` rather than ``query`` because ``trackstore.query`` is the public function.)
"""
