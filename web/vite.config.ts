import { defineConfig } from 'vite';
import tailwindcss from '@tailwindcss/vite';

// The build lands in dist/app, which the Go package beside this file embeds
// (dist/placeholder.html, checked in, stands in until it is built).
export default defineConfig({
  plugins: [tailwindcss()],
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: { outDir: 'dist/app', emptyOutDir: true, target: 'es2022' },
  server: {
    // `npm run dev` against a running server: the web server adds the
    // credential, so the dev server proxies to it, not to the API.
    proxy: { '/api': 'http://127.0.0.2:3000', '/apis': 'http://127.0.0.2:3000', '/dots/v1': 'http://127.0.0.2:3000' },
  },
});
