"""The cost explorer page (`/ui`): static HTML, JS and CSS over the `/v1/explorer` reads."""
