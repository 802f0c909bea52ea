#!/usr/bin/env bash
# Re-fetches the Stoplight Elements files that docsui embeds, from the npm registry,
# for exactly the version given (make docs-assets passes the Makefile's pin):
#
#   api/docsui/fetch-assets.sh 9.0.25
#
# npm pack checks the tarball against the registry's integrity hash; SOURCE records
# that hash so a reviewer can see where the committed files came from. Only the four
# files the page needs are kept: no node_modules, nothing else from the package.
set -euo pipefail

version="${1:?usage: $0 VERSION (an exact version of @stoplight/elements)}"
case "$version" in
  *[!0-9.]*|'') echo "$0: want an exact version like 9.0.25, got '$version'" >&2; exit 2 ;;
esac
pkg="@stoplight/elements@$version"
dest="$(cd "$(dirname "$0")" && pwd)/elements"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

integrity="$(npm view "$pkg" dist.integrity)"
tarball="$(npm view "$pkg" dist.tarball)"
if [ -z "$integrity" ]; then
  echo "$0: npm view found no $pkg" >&2
  exit 1
fi
(cd "$work" && npm pack --silent "$pkg" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work"

rm -rf "$dest"
mkdir -p "$dest"
for f in web-components.min.js web-components.min.js.LICENSE.txt styles.min.css LICENSE; do
  cp "$work/package/$f" "$dest/$f"
done
printf '%s\n' "$version" >"$dest/VERSION"
cat >"$dest/SOURCE" <<SRC
package:   $pkg
tarball:   $tarball
integrity: $integrity
license:   Apache-2.0 (LICENSE; bundled third-party notices in web-components.min.js.LICENSE.txt)
fetched by api/docsui/fetch-assets.sh; do not edit these files by hand.
SRC
echo "wrote $pkg into $dest:"
ls -l "$dest"
